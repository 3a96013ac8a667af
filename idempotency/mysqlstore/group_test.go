package mysqlstore_test

import (
	"sync"
	"testing"
	"time"

	"github.com/acemq/msgaudit/idempotency"
	"github.com/acemq/msgaudit/idempotency/mysqlstore"
	"github.com/acemq/msgaudit/idempotency/storetest"
	"github.com/acemq/msgaudit/internal/testkit/storetestkit"
	"github.com/acemq/msgaudit/internal/testkit/testwait"
)

// TestMySQLGroupConformance runs the store suite on the MySQL store
// wrapped in idempotency.Group, which sends concurrent callers'
// single-key calls as the store's batch calls: every single-key answer
// must stay what the store alone would answer.
func TestMySQLGroupConformance(t *testing.T) {
	raw := testURL(t)
	var tables sync.Map // the Group's Store → its table
	storetest.Run(t, func(t *testing.T, o idempotency.Options) idempotency.Store {
		s, table := newStore(t, o)
		g := groupStore(t, s)
		tables.Store(g, table)
		return g
	}, storetest.Capabilities{
		ServerTime:      true,
		RenewedLooksNew: true,
		Reopen: func(t *testing.T, old idempotency.Store, o idempotency.Options) idempotency.Store {
			table, ok := tables.Load(old)
			if !ok {
				t.Fatalf("Reopen of a store the test did not open: %T", old)
			}
			s, err := mysqlstore.Open(testwait.Context(t, time.Minute), storetestkit.WithQuery(raw, "msgaudit_table="+table.(string)), mysqlstore.Options{Options: o})
			if err != nil {
				t.Fatalf("reopen: %v", err)
			}
			return groupStore(t, s)
		},
	})
}

// groupStore returns s wrapped in idempotency.Group with the default
// options, closed at cleanup.
func groupStore(t *testing.T, s idempotency.Store) idempotency.Store {
	t.Helper()
	g, err := idempotency.Group(s, idempotency.GroupOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = g.Close() })
	return g
}
