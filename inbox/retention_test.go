package inbox_test

import (
	"context"
	"database/sql"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/acemq/msgaudit/inbox"
	"github.com/acemq/msgaudit/internal/testkit/testwait"
	"github.com/acemq/msgaudit/receiver"
)

// purgeLoopFn is the automatic purge's goroutine, for the leak checks.
const purgeLoopFn = "purgeloop.(*Loop).run"

// record inserts key under the test queue as recorded at.
func (b *backend) record(t testing.TB, key string, at time.Time) {
	t.Helper()
	col := "key"
	var ts any = at.UnixNano()
	switch b.dialect {
	case inbox.MySQL:
		col = "`key`"
	case inbox.PostgreSQL:
		ts = at
	}
	_, err := b.db.ExecContext(context.Background(), `INSERT INTO `+b.table+` (namespace, `+col+`, recorded_at) VALUES (`+
		b.ph(1)+`, `+b.ph(2)+`, `+b.ph(3)+`)`, testQueue, key, ts)
	if err != nil {
		t.Fatalf("%s: recording %q: %v", b.name, key, err)
	}
}

// TestPurgeBoundary: Purge(cutoff) deletes a row recorded one tick (the
// dialect's resolution) before the cutoff and keeps the row recorded at
// the cutoff and the one a tick after.
func TestPurgeBoundary(t *testing.T) {
	forEachBackend(t, func(t *testing.T, newBackend func(t testing.TB) *backend) {
		b := newBackend(t)
		ib := b.newInbox(t, inbox.Options{})
		defer ib.Close()
		tick := time.Nanosecond
		if b.dialect == inbox.PostgreSQL {
			tick = time.Microsecond // timestamptz
		}
		cutoff := time.Now().Add(-time.Hour).Truncate(time.Microsecond)
		b.record(t, "before", cutoff.Add(-tick))
		b.record(t, "at", cutoff)
		b.record(t, "after", cutoff.Add(tick))
		n, err := ib.Purge(context.Background(), cutoff)
		if err != nil || n != 1 {
			t.Fatalf("Purge(cutoff) = %d, %v; want 1 row", n, err)
		}
		if contains(t, ib, "before") {
			t.Error("the row a tick before the cutoff survived")
		}
		if !contains(t, ib, "at") || !contains(t, ib, "after") {
			t.Error("a row recorded at or after the cutoff was purged")
		}
		if st := ib.PurgeStats(); st.Runs != 1 || st.Rows != 1 || st.Errors != 0 {
			t.Errorf("PurgeStats = %+v; want 1 run, 1 row, no error", st)
		}
	})
}

// TestAutoPurge: with PurgeInterval set, the inbox deletes on its own
// every row older than Retention, in batches, and keeps every key still
// inside it (a redelivery of one is still a duplicate); PurgeStats counts
// the rows; Close stops the purge and leaves no goroutine behind.
func TestAutoPurge(t *testing.T) {
	forEachBackend(t, func(t *testing.T, newBackend func(t testing.TB) *backend) {
		b := newBackend(t)
		const retention = time.Hour
		ib := b.newInbox(t, inbox.Options{Retention: retention, PurgeBatch: 3, PurgeInterval: 20 * time.Millisecond})
		closed := false
		defer func() {
			if !closed {
				ib.Close()
			}
		}()
		h := inbox.Handler(func(ctx context.Context, tx *sql.Tx, m *receiver.Message) error { return nil })
		if res := process(t, newReceiver(t, ib, nil), msg("fresh"), h); res.Action != receiver.Ack || res.Duplicate {
			t.Fatalf("first delivery: %v duplicate=%v", res.Action, res.Duplicate)
		}
		// A minute either side of the cutoff: far enough that the test's
		// own run time cannot carry a row across it.
		now := time.Now()
		const expired = 10
		for i := range expired {
			b.record(t, fmt.Sprintf("expired-%d", i), now.Add(-retention-time.Minute-time.Duration(i)*time.Second))
			b.record(t, fmt.Sprintf("inside-%d", i), now.Add(-retention+time.Minute+time.Duration(i)*time.Second))
		}
		testwait.Until(t, testwait.Long, "the automatic purge of the expired rows", func() bool {
			return ib.PurgeStats().Rows >= expired
		})
		for i := range expired {
			if contains(t, ib, fmt.Sprintf("expired-%d", i)) {
				t.Errorf("expired-%d survived the purge", i)
			}
			if !contains(t, ib, fmt.Sprintf("inside-%d", i)) {
				t.Errorf("inside-%d, still inside the retention, was purged", i)
			}
		}
		r := newReceiver(t, ib, nil)
		for _, k := range []string{"fresh", "inside-0", "inside-9"} {
			if res := process(t, r, msg(k), h); res.Action != receiver.Ack || !res.Duplicate {
				t.Errorf("redelivery of %s after the purge: %v duplicate=%v; want a duplicate", k, res.Action, res.Duplicate)
			}
		}
		// More passes ran and found nothing more to delete.
		runs := ib.PurgeStats().Runs
		testwait.Until(t, testwait.Long, "a further purge pass", func() bool { return ib.PurgeStats().Runs > runs })
		if st := ib.PurgeStats(); st.Rows != expired || st.Errors != 0 || st.Time <= 0 {
			t.Errorf("PurgeStats = %+v; want exactly %d rows, no error, some time", st, expired)
		}
		if err := ib.Close(); err != nil {
			t.Fatalf("Close: %v", err)
		}
		closed = true
		testwait.Recv(t, inbox.PurgeDone(ib), testwait.Long, "the end of the purge goroutine at Close")
		testwait.NoGoroutine(t, testwait.Long, purgeLoopFn)
	})
}

// TestPurgeOffByDefault: without PurgeInterval nothing is purged and no
// goroutine runs.
func TestPurgeOffByDefault(t *testing.T) {
	b := newSQLite(t)
	ib := b.newInbox(t, inbox.Options{Retention: time.Hour})
	defer ib.Close()
	if g := testwait.Goroutines(purgeLoopFn); len(g) != 0 {
		t.Fatalf("a purge goroutine runs without PurgeInterval:\n%s", g[0])
	}
	b.record(t, "old", time.Now().Add(-48*time.Hour))
	if !contains(t, ib, "old") || ib.PurgeStats().Runs != 0 {
		t.Fatal("a row was purged without PurgeInterval")
	}
}

// TestPurgeWhileDelivering: the automatic purge of many expired rows runs
// while deliveries of new keys insert into the same table; every delivery
// is new work and acknowledged, every expired row is deleted, and the
// longest delivery seen during the purge is logged (measured, not
// asserted: the figures at volume are in docs/performance.md).
func TestPurgeWhileDelivering(t *testing.T) {
	forEachBackend(t, func(t *testing.T, newBackend func(t testing.TB) *backend) {
		b := newBackend(t)
		ib := b.newInbox(t, inbox.Options{Retention: time.Hour, MaxBatch: 1})
		defer ib.Close()
		const rows = 20000
		fillExpired(t, b, rows, time.Now().Add(-48*time.Hour))
		purger := b.newInbox(t, inbox.Options{Retention: time.Hour, PurgeInterval: time.Millisecond})
		defer purger.Close()
		h := inbox.Handler(func(ctx context.Context, tx *sql.Tx, m *receiver.Message) error { return nil })
		r := newReceiver(t, ib, nil)
		var (
			stop    atomic.Bool
			wg      sync.WaitGroup
			longest atomic.Int64
			done    atomic.Int64
			failed  atomic.Int64
		)
		for g := range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; !stop.Load(); i++ {
					t0 := time.Now()
					res := process(t, r, msg(fmt.Sprintf("live-%d-%d", g, i)), h)
					d := time.Since(t0)
					for {
						old := longest.Load()
						if int64(d) <= old || longest.CompareAndSwap(old, int64(d)) {
							break
						}
					}
					if res.Action != receiver.Ack || res.Duplicate {
						failed.Add(1)
					}
					done.Add(1)
				}
			}()
		}
		testwait.Until(t, 5*time.Minute, "the automatic purge of every expired row", func() bool {
			return purger.PurgeStats().Rows >= rows
		})
		stop.Store(true)
		testwait.Group(t, &wg, testwait.Long, "the delivering goroutines")
		st := purger.PurgeStats()
		if st.Rows != rows || st.Errors != 0 {
			t.Fatalf("PurgeStats = %+v; want %d rows, no error", st, rows)
		}
		if failed.Load() != 0 {
			t.Fatalf("%d of %d deliveries during the purge were not new work acknowledged", failed.Load(), done.Load())
		}
		if done.Load() == 0 {
			t.Fatal("no delivery ran during the purge")
		}
		t.Logf("%s: purged %d rows in %v (%d passes) while %d deliveries ran; longest delivery %v",
			b.name, st.Rows, st.Time.Round(time.Millisecond), st.Runs, done.Load(), time.Duration(longest.Load()).Round(time.Microsecond))
	})
}

// fillExpired inserts n rows recorded at, one microsecond apart, in one
// statement.
// hasSequenceEngine reports whether the server has MariaDB's sequence
// engine (the virtual tables seq_1_to_N).
func hasSequenceEngine(db *sql.DB) bool {
	var n int
	return db.QueryRowContext(context.Background(), "SELECT COUNT(*) FROM seq_1_to_3").Scan(&n) == nil && n == 3
}

func fillExpired(t testing.TB, b *backend, n int, at time.Time) {
	t.Helper()
	var q string
	var args []any
	switch b.dialect {
	case inbox.PostgreSQL:
		q = `INSERT INTO ` + b.table + ` (namespace, key, recorded_at)
SELECT 'expired', 'k' || g, $2::timestamptz + g * interval '1 microsecond' FROM generate_series(1, $1::int) g`
		args = []any{n, at}
	case inbox.SQLite:
		q = `WITH RECURSIVE g(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM g WHERE x < ?1)
INSERT INTO ` + b.table + ` (namespace, key, recorded_at) SELECT 'expired', 'k' || x, ?2 + x * 1000 FROM g`
		args = []any{n, at.UnixNano()}
	case inbox.MySQL:
		// MariaDB's sequence engine makes the rows 100,000 a statement;
		// elsewhere a recursive CTE does, 1,000 a statement (MariaDB stops
		// one after max_recursive_iterations, 1,000 by default).
		if n >= 100_000 && hasSequenceEngine(b.db) {
			for i := 0; i < n; i += 100_000 {
				c := min(100_000, n-i)
				_, err := b.db.ExecContext(context.Background(), "INSERT INTO "+b.table+" (namespace, `key`, recorded_at) "+
					"SELECT 'expired', CONCAT('k', ? + seq), ? + (? + seq) * 1000 FROM seq_1_to_100000 WHERE seq <= ?",
					i, at.UnixNano(), i, c)
				if err != nil {
					t.Fatalf("%s: filling expired rows: %v", b.name, err)
				}
			}
			return
		}
		for i := 0; i < n; i += 1000 {
			c := min(1000, n-i)
			_, err := b.db.ExecContext(context.Background(), "INSERT INTO "+b.table+" (namespace, `key`, recorded_at) "+
				"WITH RECURSIVE g(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM g WHERE x < ?) SELECT 'expired', CONCAT('k', ? + x), ? + (? + x) * 1000 FROM g",
				c, i, at.UnixNano(), i)
			if err != nil {
				t.Fatalf("%s: filling expired rows: %v", b.name, err)
			}
		}
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	res, err := b.db.ExecContext(ctx, q, args...)
	if err != nil {
		t.Fatalf("%s: filling %d expired rows: %v", b.name, n, err)
	}
	if got, err := res.RowsAffected(); err != nil || got != int64(n) {
		t.Fatalf("%s: filled %d rows (%v), want %d", b.name, got, err, n)
	}
}
