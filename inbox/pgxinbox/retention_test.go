package pgxinbox_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/acemq/msgaudit/inbox"
	"github.com/acemq/msgaudit/inbox/pgxinbox"
	"github.com/acemq/msgaudit/internal/testkit/testwait"
)

// TestAutoPurge: on pgx too, the automatic purge deletes the rows older
// than Retention and keeps those inside it, Purge keeps the row recorded
// at its cutoff and deletes the one a microsecond before, PurgeStats
// counts the rows, and Close stops the purge goroutine.
func TestAutoPurge(t *testing.T) {
	f := newFixture(t, 0)
	ctx := testwait.Context(t, time.Minute)
	record := func(key string, at time.Time) {
		t.Helper()
		if _, err := f.pool.Exec(ctx, `INSERT INTO `+f.table+` (namespace, key, recorded_at) VALUES ($1, $2, $3)`, testQueue, key, at); err != nil {
			t.Fatal(err)
		}
	}
	cutoff := time.Now().Add(-48 * time.Hour).Truncate(time.Microsecond)
	record("before", cutoff.Add(-time.Microsecond))
	record("at", cutoff)
	if n, err := f.ib.Purge(ctx, cutoff); err != nil || n != 1 {
		t.Fatalf("Purge(cutoff) = %d, %v; want 1", n, err)
	}
	if f.recorded(t, "before") || !f.recorded(t, "at") {
		t.Fatal("Purge(cutoff) did not delete exactly the row before the cutoff")
	}

	const retention = time.Hour
	ib, err := pgxinbox.New(ctx, f.pool, inbox.Options{Table: f.table, Retention: retention, PurgeBatch: 3, PurgeInterval: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer ib.Close()
	now := time.Now()
	const expired = 10
	for i := range expired {
		record(fmt.Sprintf("expired-%d", i), now.Add(-retention-time.Minute-time.Duration(i)*time.Second))
		record(fmt.Sprintf("inside-%d", i), now.Add(-retention+time.Minute+time.Duration(i)*time.Second))
	}
	// "at" is 48 hours old: expired too.
	testwait.Until(t, testwait.Long, "the automatic purge", func() bool { return ib.PurgeStats().Rows >= expired+1 })
	for i := range expired {
		if f.recorded(t, fmt.Sprintf("expired-%d", i)) {
			t.Errorf("expired-%d survived", i)
		}
		if !f.recorded(t, fmt.Sprintf("inside-%d", i)) {
			t.Errorf("inside-%d, still inside the retention, was purged", i)
		}
	}
	if st := ib.PurgeStats(); st.Rows != expired+1 || st.Errors != 0 {
		t.Errorf("PurgeStats = %+v; want %d rows, no error", st, expired+1)
	}
	if err := ib.Close(); err != nil {
		t.Fatal(err)
	}
	testwait.Recv(t, pgxinbox.PurgeDone(ib), testwait.Long, "the end of the purge goroutine at Close")
}
