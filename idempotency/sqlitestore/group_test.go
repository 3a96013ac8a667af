package sqlitestore_test

import (
	"path/filepath"
	"testing"

	"github.com/acemq/msgaudit/idempotency"
	"github.com/acemq/msgaudit/idempotency/storetest"
)

// TestSQLiteGroupConformance runs the store suite on the SQLite store
// wrapped in idempotency.Group, which sends concurrent callers'
// single-key calls as the store's batch calls: every single-key answer
// must stay what the store alone would answer.
func TestSQLiteGroupConformance(t *testing.T) {
	t.Parallel()
	group := func(t *testing.T, path string, o idempotency.Options) idempotency.Store {
		g, err := idempotency.Group(openSQLiteTest(t, path, o), idempotency.GroupOptions{})
		if err != nil {
			t.Fatal(err)
		}
		sqlitePaths.Store(g, path)
		t.Cleanup(func() { _ = g.Close() })
		return g
	}
	storetest.Run(t, func(t *testing.T, o idempotency.Options) idempotency.Store {
		return group(t, filepath.Join(t.TempDir(), "idem.db"), o)
	}, storetest.Capabilities{
		Reopen: func(t *testing.T, old idempotency.Store, o idempotency.Options) idempotency.Store {
			path, ok := sqlitePaths.Load(old)
			if !ok {
				t.Fatal("reopen: unknown store")
			}
			return group(t, path.(string), o)
		},
	})
}
