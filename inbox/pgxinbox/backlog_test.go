package pgxinbox_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/acemq/msgaudit/idempotency"
	"github.com/acemq/msgaudit/inbox/pgxinbox"
	"github.com/acemq/msgaudit/receiver"
)

// TestBacklog is package inbox's TestBacklog on pgx: rows and the oldest
// row's age after some deliveries, and after a purge.
func TestBacklog(t *testing.T) {
	f := newFixture(t, 0)
	ctx := context.Background()
	sample := func() idempotency.Backlog {
		t.Helper()
		got, err := f.ib.Backlog(ctx)
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
	h := pgxinbox.Handler(func(ctx context.Context, tx pgx.Tx, m *receiver.Message) error { return f.apply(ctx, tx, m.Key, "ok") })
	r := f.receiver(t)
	const n = 3
	for i := range n {
		if res := process(r, fmt.Sprintf("k-%d", i), h); res.Action != receiver.Ack {
			t.Fatalf("delivery %d: %v", i, res.Action)
		}
	}
	const aged = 150 * time.Millisecond
	time.Sleep(aged)
	cut := time.Now()
	if res := process(r, "newest", h); res.Action != receiver.Ack {
		t.Fatalf("newest delivery: %v", res.Action)
	}
	got := sample()
	if got.Rows < n+1 {
		t.Fatalf("Backlog.Rows = %d, want at least %d", got.Rows, n+1)
	}
	if got.OldestRow < aged || got.OldestRow > time.Minute {
		t.Fatalf("Backlog.OldestRow = %v, want at least %v", got.OldestRow, aged)
	}
	if purged, err := f.ib.Purge(ctx, cut); err != nil || purged != n {
		t.Fatalf("Purge = %d, %v; want %d rows", purged, err, n)
	}
	got = sample()
	if got.Rows < 1 {
		t.Fatalf("after the purge: Backlog.Rows = %d, want at least 1", got.Rows)
	}
	if got.OldestRow >= aged {
		t.Fatalf("after the purge: Backlog.OldestRow = %v, want the newest row's age, under %v", got.OldestRow, aged)
	}
}
