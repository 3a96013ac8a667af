package sqlitestore_test

import (
	"context"
	"fmt"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/acemq/msgaudit/idempotency"
	"github.com/acemq/msgaudit/idempotency/sqlitestore"
	"github.com/acemq/msgaudit/internal/testkit/testwait"
)

// TestSQLiteAutoPurgeBoundary: the automatic purge, on the store's clock,
// keeps a confirmation one nanosecond before its retention ends (it still
// answers AlreadyConfirmed) and deletes it at the nanosecond it ends;
// PurgeStats counts the rows; Close stops the purge and its goroutine.
func TestSQLiteAutoPurgeBoundary(t *testing.T) {
	const retention = time.Hour
	t0 := time.Unix(1_700_000_000, 0)
	var now atomic.Int64
	now.Store(t0.UnixNano())
	clock := idempotency.ClockFunc(func() time.Time { return time.Unix(0, now.Load()) })
	s, err := sqlitestore.Open(context.Background(), filepath.Join(t.TempDir(), "s.db"), sqlitestore.Options{Options: idempotency.Options{
		Retention: retention, Clock: clock, PurgeInterval: time.Millisecond, PurgeBatch: 2}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := testwait.Context(t, time.Minute)
	const n = 5
	keys := make([]idempotency.Key, n)
	for i := range keys {
		keys[i] = idempotency.Key{Namespace: "orders", ID: fmt.Sprintf("k%d", i)}
		out, c, err := s.TryClaim(ctx, keys[i])
		if err != nil || out != idempotency.Claimed {
			t.Fatalf("TryClaim = %v, %v", out, err)
		}
		if err := s.Confirm(ctx, c); err != nil {
			t.Fatal(err)
		}
	}
	late := idempotency.Key{Namespace: "orders", ID: "late"}
	now.Store(t0.Add(time.Second).UnixNano())
	if out, c, err := s.TryClaim(ctx, late); err != nil || out != idempotency.Claimed {
		t.Fatalf("TryClaim = %v, %v", out, err)
	} else if err := s.Confirm(ctx, c); err != nil {
		t.Fatal(err)
	}

	// passes waits for two more passes than now: one that began after the
	// clock moved.
	passes := func() {
		runs := s.PurgeStats().Runs
		testwait.Until(t, testwait.Long, "two more purge passes", func() bool { return s.PurgeStats().Runs >= runs+2 })
	}
	now.Store(t0.Add(retention - 1).UnixNano())
	passes()
	if st := s.PurgeStats(); st.Rows != 0 {
		t.Fatalf("the purge deleted %d rows a nanosecond before their retention ended", st.Rows)
	}
	for _, k := range append(keys, late) {
		if out, _, err := s.TryClaim(ctx, k); err != nil || out != idempotency.AlreadyConfirmed {
			t.Fatalf("TryClaim(%v) a nanosecond before the end of its retention = %v, %v; want already-confirmed", k, out, err)
		}
	}
	now.Store(t0.Add(retention).UnixNano())
	testwait.Until(t, testwait.Long, "the purge of the expired confirmations", func() bool { return s.PurgeStats().Rows >= n })
	passes()
	if st := s.PurgeStats(); st.Rows != n || st.Errors != 0 {
		t.Fatalf("PurgeStats = %+v; want exactly %d rows, no error", st, n)
	}
	if out, _, err := s.TryClaim(ctx, late); err != nil || out != idempotency.AlreadyConfirmed {
		t.Fatalf("TryClaim(late), still inside its retention = %v, %v; want already-confirmed", out, err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	testwait.Recv(t, sqlitestore.PurgeDone(s), testwait.Long, "the end of the purge goroutine at Close")
}
