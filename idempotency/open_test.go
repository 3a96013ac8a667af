package idempotency_test

import (
	"context"
	"errors"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/acemq/msgaudit/idempotency"
	_ "github.com/acemq/msgaudit/idempotency/pgstore"
	_ "github.com/acemq/msgaudit/idempotency/redisstore"
	"github.com/acemq/msgaudit/idempotency/sqlitestore"
	"github.com/acemq/msgaudit/internal/redact"
	"github.com/acemq/msgaudit/internal/testkit/testwait"
)

func TestOpen(t *testing.T) {
	t.Parallel()
	ctx := testwait.Context(t, time.Minute)
	dir := t.TempDir()
	tests := []struct {
		url  string
		want string // the concrete type, "" for an error
		err  error
	}{
		{"memory", "*idempotency.Memory", nil},
		{"MEMORY", "*idempotency.Memory", nil},
		{"sqlite:" + filepath.Join(dir, "a.db"), "*sqlitestore.Store", nil},
		{"sqlite://" + filepath.Join(dir, "b.db"), "*sqlitestore.Store", nil},
		{"sqlite:" + filepath.Join(dir, "c.db") + "?_pragma=synchronous(NORMAL)", "*sqlitestore.Store", nil},
		{"memory:/x", "", idempotency.ErrUnsupportedURL},
		{"sqlite:", "", idempotency.ErrUnsupportedURL},
		{"sqlite://", "", idempotency.ErrUnsupportedURL},
		{"mysql://root:s3cretpw@db/x", "", idempotency.ErrUnsupportedURL},
		{"", "", idempotency.ErrUnsupportedURL},
	}
	for _, tt := range tests {
		s, err := idempotency.Open(ctx, tt.url, idempotency.Options{})
		if tt.err != nil {
			if !errors.Is(err, tt.err) || s != nil {
				t.Errorf("Open(%q) = %v, %v; want %v", tt.url, s, err, tt.err)
			}
			if err != nil && strings.Contains(err.Error(), "s3cretpw") {
				t.Errorf("Open(%q) error leaks the password: %v", tt.url, err)
			}
			continue
		}
		if err != nil {
			t.Errorf("Open(%q): %v", tt.url, err)
			continue
		}
		if got := typeName(s); got != tt.want {
			t.Errorf("Open(%q) = %s, want %s", tt.url, got, tt.want)
		}
		// The store works.
		o, _, err := s.TryClaim(ctx, idempotency.Key{ID: "m1"})
		if err != nil || o != idempotency.Claimed {
			t.Errorf("Open(%q): TryClaim = %v, %v", tt.url, o, err)
		}
		if err := s.Close(); err != nil {
			t.Errorf("Open(%q): Close: %v", tt.url, err)
		}
	}
}

func typeName(s idempotency.Store) string {
	switch s.(type) {
	case *idempotency.Memory:
		return "*idempotency.Memory"
	case *sqlitestore.Store:
		return "*sqlitestore.Store"
	}
	return "other"
}

func TestOpenRejects(t *testing.T) {
	t.Parallel()
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	if s, err := idempotency.Open(cancelled, "memory", idempotency.Options{}); !errors.Is(err, context.Canceled) || s != nil {
		t.Fatalf("Open with a cancelled context = %v, %v", s, err)
	}
	if s, err := idempotency.Open(context.Background(), "memory", idempotency.Options{Retention: -1}); !errors.Is(err, idempotency.ErrOptions) || s != nil {
		t.Fatalf("Open with negative retention = %v, %v", s, err)
	}
	if _, err := idempotency.Open(context.Background(), "sqlite:"+filepath.Join(t.TempDir(), "no", "such", "dir", "x.db"), idempotency.Options{}); err == nil {
		t.Fatal("Open of an SQLite file in a missing directory succeeded")
	}
}

// TestOpenNeverLeaksPassword points every networked scheme at a closed
// port with a password in the URL: the error must not contain it.
func TestOpenNeverLeaksPassword(t *testing.T) {
	t.Parallel()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	_ = l.Close()
	const pw = "Hunter2SecretPw"
	for _, u := range []string{
		"redis://user:" + pw + "@" + addr + "/0",
		"rediss://:" + pw + "@" + addr,
		"redis://user:" + pw + "@" + addr + "/notadb",
		"postgres://postgres:" + pw + "@" + addr + "/test?sslmode=disable&connect_timeout=2",
		"postgresql://" + addr + "/test?sslmode=disable&password=" + pw,
		"postgres://postgres:" + pw + "@" + addr + ":bad/test",
	} {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		s, err := idempotency.Open(ctx, u, idempotency.Options{})
		cancel()
		if err == nil {
			_ = s.Close()
			t.Errorf("Open(%s) on a closed port succeeded", redact.URL(u))
			continue
		}
		if strings.Contains(err.Error(), pw) {
			t.Errorf("Open error leaks the password: %v", err)
		}
	}
}
