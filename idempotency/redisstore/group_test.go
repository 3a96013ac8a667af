package redisstore_test

import (
	"fmt"
	"net/url"
	"sync"
	"testing"
	"time"

	"github.com/acemq/msgaudit/idempotency"
	"github.com/acemq/msgaudit/idempotency/redisstore"
	"github.com/acemq/msgaudit/idempotency/storetest"
	"github.com/acemq/msgaudit/internal/testkit/storetestkit"
	"github.com/acemq/msgaudit/internal/testkit/testwait"
)

// TestRedisGroupConformance runs the store suite on the Redis store
// wrapped in idempotency.Group, which sends concurrent callers' single-key
// calls as the store's pipelined batch calls: every single-key answer must
// stay what the store alone would answer.
func TestRedisGroupConformance(t *testing.T) {
	raw := redisTestURL(t)
	var prefixes sync.Map // the Group's Store → its prefix
	storetest.Run(t, func(t *testing.T, o idempotency.Options) idempotency.Store {
		s, _, prefix := newRedisTestStore(t, o)
		g := groupStore(t, s)
		prefixes.Store(g, prefix)
		t.Cleanup(func() { _ = g.Close() })
		return g
	}, storetest.Capabilities{
		ServerTime: true,
		Reopen: func(t *testing.T, old idempotency.Store, o idempotency.Options) idempotency.Store {
			prefix, ok := prefixes.Load(old)
			if !ok {
				t.Fatalf("Reopen of a store the test did not open: %T", old)
			}
			s, err := redisstore.Open(testwait.Context(t, time.Minute), storetestkit.WithQuery(raw, "msgaudit_prefix="+url.QueryEscape(prefix.(string))), redisstore.Options{Options: o})
			if err != nil {
				t.Fatalf("reopen: %v", err)
			}
			return groupStore(t, s)
		},
	})
}

// BenchmarkRedisGroupPairs: TryClaim + Confirm pairs on new keys from 1,
// 16 and 64 goroutines, straight to the store ("single") and through
// idempotency.Group with its defaults ("grouped"), which turns the
// concurrent calls into pipelined batch calls. round-trips/op counts
// commands and pipelines sent per pair.
func BenchmarkRedisGroupPairs(b *testing.B) {
	for _, grouped := range []bool{false, true} {
		for _, g := range []int{1, 16, 64} {
			name := fmt.Sprintf("single/goroutines=%d", g)
			if grouped {
				name = fmt.Sprintf("grouped/goroutines=%d", g)
			}
			b.Run(name, func(b *testing.B) {
				s, client, _ := newRedisTestStore(b, idempotency.Options{})
				var rt redisCounter
				client.AddHook(&rt)
				var st idempotency.Store = s
				if grouped {
					st = groupStore(b, s)
				}
				storetestkit.BenchPairs(b, st, g, rt.n.Load)
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
