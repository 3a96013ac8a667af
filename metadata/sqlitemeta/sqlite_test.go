package sqlitemeta_test

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/acemq/msgaudit/metadata"
	"github.com/acemq/msgaudit/metadata/sqlitemeta"
	"github.com/acemq/msgaudit/metadata/storetest"
)

// TestConformance runs the metadata conformance suite on a database file;
// every reopen is a new Store on the same file, as another process would
// have.
func TestConformance(t *testing.T) {
	t.Parallel()
	storetest.Run(t, func(t *testing.T) storetest.Opener {
		path := filepath.Join(t.TempDir(), "meta.db")
		return func(t *testing.T) metadata.Store {
			s, err := sqlitemeta.Open(context.Background(), path)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { s.Close() })
			return s
		}
	})
}

// TestNewArguments: a nil database or an empty path is refused at
// construction.
func TestNewArguments(t *testing.T) {
	t.Parallel()
	for _, name := range []string{"", "1abc", "a.b.c", "a b", `a"b`, strings.Repeat("x", 64), "t"} {
		if _, err := sqlitemeta.New(nil, name); err == nil {
			t.Errorf("sqlitemeta.New(nil, %q) succeeded", name)
		}
	}
	if _, err := sqlitemeta.Open(context.Background(), ""); err == nil {
		t.Error("sqlitemeta.Open(empty path) succeeded")
	}
}

func BenchmarkStore(b *testing.B) {
	ctx := context.Background()
	open := func(b *testing.B) metadata.Store {
		s, err := sqlitemeta.Open(ctx, filepath.Join(b.TempDir(), "bench.db"))
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { s.Close() })
		return s
	}
	storetest.Bench(b, open)
}
