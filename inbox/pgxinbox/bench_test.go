package pgxinbox_test

import (
	"context"
	"strconv"
	"testing"

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
