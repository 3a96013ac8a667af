package pgxinbox_test

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"

	"github.com/acemq/msgaudit/inbox"
	"github.com/acemq/msgaudit/inbox/pgxinbox"
	"github.com/acemq/msgaudit/receiver"
	"github.com/jackc/pgx/v5"
)

// BenchmarkInbox is the pgx inbox's cost per new message through a
// receiver (BEGIN, INSERT, the handler's no-op, COMMIT) and per recorded
// key seen by a process that does not remember it (BEGIN, INSERT finding
// the row, ROLLBACK).
func BenchmarkInbox(b *testing.B) {
	b.Run("new", func(b *testing.B) {
		f := newFixture(b, 0)
		r := f.receiver(b)
		h := pgxinbox.Handler(func(ctx context.Context, tx pgx.Tx, m *receiver.Message) error { return nil })
		ctx := context.Background()
		b.ReportAllocs()
		for i := 0; b.Loop(); i++ {
			if res := r.Process(ctx, &receiver.Message{Key: "b-" + strconv.Itoa(i), Destination: testQueue}, h); res.Action != receiver.Ack {
				b.Fatalf("delivery %d: %v %s %v", i, res.Action, res.Reason, res.Err)
			}
		}
	})
	b.Run("duplicate", func(b *testing.B) {
		f := newFixture(b, 0)
		h := pgxinbox.Handler(func(ctx context.Context, tx pgx.Tx, m *receiver.Message) error { return nil })
		if res := process(f.receiver(b), "dup", h); res.Action != receiver.Ack {
			b.Fatalf("first delivery: %v", res.Action)
		}
		ctx := context.Background()
		m := &receiver.Message{Key: "dup", Destination: testQueue}
		b.ReportAllocs()
		for b.Loop() {
			d, err := f.ib.Select(ctx, m)
			if err != nil || d.Verdict != receiver.Reject {
				b.Fatalf("Select of a recorded key: %v, %v", d.Verdict, err)
			}
		}
	})
}

// BenchmarkInboxParallel is the pgx inbox's cost per new message with 16
// concurrent receiver.Process callers (8 per GOMAXPROCS) and a no-op
// handler: MaxBatch 1 (a transaction per message) against the default
// (one COMMIT per batch, DefaultLanes lanes). msgs/commit is how many
// messages a COMMIT covered on average.
func BenchmarkInboxParallel(b *testing.B) {
	for _, mb := range []int{1, 0} {
		name := "maxbatch=" + strconv.Itoa(mb)
		if mb == 0 {
			name = "default"
		}
		b.Run(name, func(b *testing.B) {
			f := newFixture(b, 0)
			ib, err := pgxinbox.New(context.Background(), f.pool, inbox.Options{Table: f.table, MaxBatch: mb})
			if err != nil {
				b.Fatal(err)
			}
			r, err := receiver.New(receiver.Config{Selectors: []receiver.Selector{ib}})
			if err != nil {
				b.Fatal(err)
			}
			h := pgxinbox.Handler(func(ctx context.Context, tx pgx.Tx, m *receiver.Message) error { return nil })
			ctx := context.Background()
			var n atomic.Int64
			b.ReportAllocs()
			b.SetParallelism(8)
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					i := n.Add(1)
					if res := r.Process(ctx, &receiver.Message{Key: "p-" + strconv.FormatInt(i, 10), Destination: testQueue}, h); res.Action != receiver.Ack {
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
