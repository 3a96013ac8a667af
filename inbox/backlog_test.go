package inbox_test

import (
	"context"
	"database/sql"
	"fmt"
	"testing"
	"time"

	"github.com/acemq/msgaudit/idempotency"
	"github.com/acemq/msgaudit/inbox"
	"github.com/acemq/msgaudit/receiver"
)

// TestBacklog: an empty inbox samples as zeros; after some deliveries it
// holds their rows, none of them a claim, and its oldest row ages; after a
// purge of all but the newest, the oldest row is that one.
func TestBacklog(t *testing.T) {
	forEachBackend(t, func(t *testing.T, newBackend func(t testing.TB) *backend) {
		b := newBackend(t)
		ib := b.newInbox(t, inbox.Options{})
		ctx := context.Background()
		sample := func() idempotency.Backlog {
			t.Helper()
			got, err := ib.Backlog(ctx)
			if err != nil {
				t.Fatalf("Backlog: %v", err)
			}
			t.Logf("Backlog = %+v", got)
			if got.Held != 0 || got.OldestHeld != 0 {
				t.Fatalf("an inbox holds no claims: Backlog = %+v", got)
			}
			return got
		}
		if got := sample(); got != (idempotency.Backlog{}) {
			t.Fatalf("empty inbox: Backlog = %+v, want zeros", got)
		}
		h := inbox.Handler(func(ctx context.Context, tx *sql.Tx, m *receiver.Message) error { return nil })
		r := newReceiver(t, ib, nil)
		const n = 3
		for i := range n {
			if res := process(t, r, msg(fmt.Sprintf("k-%d", i)), h); res.Action != receiver.Ack {
				t.Fatalf("delivery %d: %v", i, res.Action)
			}
		}
		const aged = 150 * time.Millisecond
		time.Sleep(aged)
		cut := time.Now()
		if res := process(t, r, msg("newest"), h); res.Action != receiver.Ack {
			t.Fatalf("newest delivery: %v", res.Action)
		}
		got := sample()
		if got.Rows < n+1 {
			t.Fatalf("Backlog.Rows = %d, want at least %d", got.Rows, n+1)
		}
		if got.OldestRow < aged || got.OldestRow > time.Minute {
			t.Fatalf("Backlog.OldestRow = %v, want at least %v", got.OldestRow, aged)
		}
		if purged, err := ib.Purge(ctx, cut); err != nil || purged != n {
			t.Fatalf("Purge = %d, %v; want %d rows", purged, err, n)
		}
		got = sample()
		if got.Rows < 1 {
			t.Fatalf("after the purge: Backlog.Rows = %d, want at least 1", got.Rows)
		}
		if got.OldestRow >= aged {
			t.Fatalf("after the purge: Backlog.OldestRow = %v, want the newest row's age, under %v", got.OldestRow, aged)
		}
		if purged, err := ib.Purge(ctx, time.Now().Add(time.Minute)); err != nil || purged != 1 {
			t.Fatalf("Purge = %d, %v; want 1 row", purged, err)
		}
		if got := sample(); got.OldestRow != 0 {
			t.Fatalf("emptied inbox: Backlog.OldestRow = %v, want 0", got.OldestRow)
		}
	})
}
