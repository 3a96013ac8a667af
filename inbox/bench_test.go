package inbox_test

import (
	"context"
	"database/sql"
	"fmt"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/acemq/msgaudit/inbox"
	"github.com/acemq/msgaudit/receiver"
)

// BenchmarkInbox is the inbox's cost per message through a receiver: a new
// key (BEGIN, INSERT, the handler's no-op, COMMIT) and a recorded key seen
// by a process that does not remember it (BEGIN, INSERT that finds the
// row, ROLLBACK). SQLite is a WAL file in a temp dir with the default
// synchronous setting; PostgreSQL is MSGAUDIT_POSTGRES_URL.
func BenchmarkInbox(b *testing.B) {
	for _, c := range []struct {
		name string
		open func(testing.TB) *backend
	}{
		{"sqlite", newSQLite},
		{"postgres", func(t testing.TB) *backend { return newPostgres(t, false) }},
	} {
		b.Run(c.name+"/new", func(b *testing.B) {
			be := c.open(b)
			ib := be.newInbox(b, inbox.Options{})
			r := newReceiver(b, ib, nil)
			h := inbox.Handler(func(ctx context.Context, tx *sql.Tx, m *receiver.Message) error { return nil })
			prefix := "b-" + randHex(4) + "-"
			ctx := context.Background()
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				if res := r.Process(ctx, msg(prefix+strconv.Itoa(i)), h); res.Action != receiver.Ack {
					b.Fatalf("delivery %d: %v %s %v", i, res.Action, res.Reason, res.Err)
				}
			}
		})
		b.Run(c.name+"/duplicate", func(b *testing.B) {
			be := c.open(b)
			ib := be.newInbox(b, inbox.Options{})
			h := inbox.Handler(func(ctx context.Context, tx *sql.Tx, m *receiver.Message) error { return nil })
			key := "dup-" + randHex(4)
			if res := process(b, newReceiver(b, ib, nil), msg(key), h); res.Action != receiver.Ack {
				b.Fatalf("first delivery: %v", res.Action)
			}
			ctx := context.Background()
			m := msg(key)
			b.ReportAllocs()
			for b.Loop() {
				d, err := ib.Select(ctx, m)
				if err != nil || d.Verdict != receiver.Reject {
					b.Fatalf("Select of a recorded key: %v, %v", d.Verdict, err)
				}
			}
		})
	}
}

// BenchmarkInboxParallel is the inbox's cost per new message with many
// concurrent receiver.Process callers (16 goroutines on 2 CPUs: 8 per
// GOMAXPROCS) on one inbox, the handler a no-op: MaxBatch 1 (a
// transaction per message: BEGIN, INSERT, COMMIT) against the default
// (batches: a savepoint and an INSERT per message, one COMMIT per batch).
// Lanes are the defaults: one on SQLite, DefaultLanes on PostgreSQL.
// msgs/commit is how many messages a COMMIT covered on average.
func BenchmarkInboxParallel(b *testing.B) {
	for _, c := range []struct {
		name string
		open func(testing.TB) *backend
	}{
		{"sqlite", newSQLite},
		{"postgres", func(t testing.TB) *backend { return newPostgres(t, false) }},
	} {
		for _, mb := range []int{1, 0} {
			name := c.name + "/maxbatch=" + strconv.Itoa(mb)
			if mb == 0 {
				name = c.name + "/default"
			}
			b.Run(name, func(b *testing.B) {
				be := c.open(b)
				ib := be.newInbox(b, inbox.Options{MaxBatch: mb})
				r := newReceiver(b, ib, nil)
				h := inbox.Handler(func(ctx context.Context, tx *sql.Tx, m *receiver.Message) error { return nil })
				prefix := "p-" + randHex(4) + "-"
				ctx := context.Background()
				var n atomic.Int64
				b.ReportAllocs()
				b.SetParallelism(8)
				b.ResetTimer()
				b.RunParallel(func(pb *testing.PB) {
					for pb.Next() {
						i := n.Add(1)
						if res := r.Process(ctx, msg(prefix+strconv.FormatInt(i, 10)), h); res.Action != receiver.Ack {
							b.Errorf("delivery %d: %v %s %v", i, res.Action, res.Reason, res.Err)
							return
						}
					}
				})
				b.StopTimer()
				commits, members := ib.Batches()
				if commits > 0 {
					b.ReportMetric(float64(members)/float64(commits), "msgs/commit")
				}
			})
		}
	}
}

// BenchmarkInboxBatchOptions is the per-message cost with 64 concurrent
// Process callers (32 per GOMAXPROCS) for a range of MaxBatch and Linger
// values: the measurement behind the default MaxBatch and Linger (63 is the most
// PostgreSQL allows).
func BenchmarkInboxBatchOptions(b *testing.B) {
	for _, c := range []struct {
		name string
		open func(testing.TB) *backend
	}{
		{"sqlite", newSQLite},
		{"postgres", func(t testing.TB) *backend { return newPostgres(t, false) }},
	} {
		for _, o := range []struct {
			maxBatch int
			linger   time.Duration
		}{{8, 5 * time.Millisecond}, {32, time.Millisecond}, {32, 5 * time.Millisecond}, {32, 20 * time.Millisecond}, {63, 5 * time.Millisecond}} {
			b.Run(fmt.Sprintf("%s/maxbatch=%d/linger=%v", c.name, o.maxBatch, o.linger), func(b *testing.B) {
				be := c.open(b)
				ib := be.newInbox(b, inbox.Options{MaxBatch: o.maxBatch, Linger: o.linger})
				r := newReceiver(b, ib, nil)
				h := inbox.Handler(func(ctx context.Context, tx *sql.Tx, m *receiver.Message) error { return nil })
				prefix := "o-" + randHex(4) + "-"
				ctx := context.Background()
				var n atomic.Int64
				b.ReportAllocs()
				b.SetParallelism(32)
				b.ResetTimer()
				b.RunParallel(func(pb *testing.PB) {
					for pb.Next() {
						i := n.Add(1)
						if res := r.Process(ctx, msg(prefix+strconv.FormatInt(i, 10)), h); res.Action != receiver.Ack {
							b.Errorf("delivery %d: %v %s %v", i, res.Action, res.Reason, res.Err)
							return
						}
					}
				})
				b.StopTimer()
				if commits, members := ib.Batches(); commits > 0 {
					b.ReportMetric(float64(members)/float64(commits), "msgs/commit")
				}
			})
		}
	}
}
