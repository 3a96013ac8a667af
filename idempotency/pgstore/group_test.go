package pgstore_test

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/acemq/msgaudit/idempotency"
	"github.com/acemq/msgaudit/idempotency/pgstore"
	"github.com/acemq/msgaudit/idempotency/storetest"
	"github.com/acemq/msgaudit/internal/testkit/storetestkit"
	"github.com/acemq/msgaudit/internal/testkit/testwait"
)

// TestPostgresGroupConformance runs the store suite on the PostgreSQL
// store wrapped in idempotency.Group, which sends concurrent callers'
// single-key calls as the store's batch calls: every single-key answer
// must stay what the store alone would answer.
func TestPostgresGroupConformance(t *testing.T) {
	raw := postgresTestURL(t)
	var tables sync.Map // the Group's Store → its table
	storetest.Run(t, func(t *testing.T, o idempotency.Options) idempotency.Store {
		s, _, table := newPostgresTestStore(t, o, nil, 8)
		g := groupStore(t, s)
		tables.Store(g, table)
		t.Cleanup(func() { _ = g.Close() })
		return g
	}, storetest.Capabilities{
		ServerTime: true,
		Reopen: func(t *testing.T, old idempotency.Store, o idempotency.Options) idempotency.Store {
			table, ok := tables.Load(old)
			if !ok {
				t.Fatalf("Reopen of a store the test did not open: %T", old)
			}
			s, err := pgstore.Open(testwait.Context(t, time.Minute), storetestkit.WithQuery(raw, "msgaudit_table="+table.(string)), pgstore.Options{Options: o})
			if err != nil {
				t.Fatalf("reopen: %v", err)
			}
			return groupStore(t, s)
		},
	})
}

// BenchmarkPostgresGroupPairs: TryClaim + Confirm pairs on new keys from
// 1, 16 and 64 goroutines, straight to the store ("single", a pool of 16
// connections) and through idempotency.Group with its defaults
// ("grouped"), which turns the concurrent calls into batch statements.
func BenchmarkPostgresGroupPairs(b *testing.B) {
	for _, grouped := range []bool{false, true} {
		for _, g := range []int{1, 16, 64} {
			name := fmt.Sprintf("single/goroutines=%d", g)
			if grouped {
				name = fmt.Sprintf("grouped/goroutines=%d", g)
			}
			b.Run(name, func(b *testing.B) {
				var tr pgCounter
				tr.noSQL = true
				s, _, _ := newPostgresTestStore(b, idempotency.Options{}, &tr, 16)
				var st idempotency.Store = s
				if grouped {
					st = groupStore(b, s)
				}
				storetestkit.BenchPairs(b, st, g, func() int64 { return tr.queries.Load() + tr.prepares.Load() })
			})
		}
	}
}

// groupStore returns s wrapped in idempotency.Group with the default options,
// failing tb if Group refuses them.
func groupStore(tb testing.TB, s idempotency.Store) idempotency.Store {
	tb.Helper()
	g, err := idempotency.Group(s, idempotency.GroupOptions{})
	if err != nil {
		tb.Fatal(err)
	}
	return g
}
