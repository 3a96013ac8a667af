package inbox_test

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/acemq/msgaudit/inbox"
	"github.com/acemq/msgaudit/internal/inboxsql"
	"github.com/acemq/msgaudit/receiver"
)

// TestPurge: Purge deletes exactly the rows recorded before its cutoff, in
// batches of PurgeBatch, through the recorded_at index; PurgeExpired keeps
// rows younger than Retention; a redelivery of a purged key is new work.
func TestPurge(t *testing.T) {
	forEachBackend(t, func(t *testing.T, newBackend func(t testing.TB) *backend) {
		b := newBackend(t)
		ib := b.newInbox(t, inbox.Options{PurgeBatch: 2, Retention: time.Hour})
		ctx := context.Background()
		h := inbox.Handler(func(ctx context.Context, tx *sql.Tx, m *receiver.Message) error { return nil })
		r := newReceiver(t, ib, nil)
		const n = 5
		for i := range n {
			if res := process(t, r, msg(fmt.Sprintf("old-%d", i)), h); res.Action != receiver.Ack {
				t.Fatalf("delivery %d: %v", i, res.Action)
			}
		}
		if got, err := ib.PurgeExpired(ctx); err != nil || got != 0 {
			t.Fatalf("PurgeExpired with 1h retention = %d, %v; want 0 rows", got, err)
		}
		if got, err := ib.Purge(ctx, time.Now().Add(-time.Minute)); err != nil || got != 0 {
			t.Fatalf("Purge before the rows = %d, %v; want 0", got, err)
		}
		got, err := ib.Purge(ctx, time.Now().Add(time.Minute))
		if err != nil || got != n {
			t.Fatalf("Purge after the rows = %d, %v; want %d", got, err, n)
		}
		if contains(t, ib, "old-0") {
			t.Error("a purged key is still recorded")
		}
		// Documented: a redelivery older than retention (its row purged) is new.
		if res := process(t, newReceiver(t, ib, nil), msg("old-0"), h); res.Action != receiver.Ack || res.Duplicate {
			t.Errorf("redelivery of a purged key: %v duplicate=%v; want new work", res.Action, res.Duplicate)
		}
		// The purge's row selection can use the recorded_at index.
		plan := explainPurge(t, b)
		if !strings.Contains(plan, b.table+"_recorded_at_idx") {
			t.Errorf("the purge's plan does not use the recorded_at index:\n%s", plan)
		}
	})
}

func explainPurge(t *testing.T, b *backend) string {
	t.Helper()
	ctx := context.Background()
	c, err := b.db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	st, err := inboxsql.Build(b.table, map[inbox.Dialect]inboxsql.Kind{inbox.PostgreSQL: inboxsql.Postgres, inbox.SQLite: inboxsql.SQLite, inbox.MySQL: inboxsql.MySQL}[b.dialect])
	if err != nil {
		t.Fatal(err)
	}
	q := st.Purge // the statement Purge runs
	explain := `EXPLAIN QUERY PLAN `
	args := []any{time.Now().UnixNano(), 10}
	switch b.dialect {
	case inbox.MySQL:
		explain = `EXPLAIN `
	case inbox.PostgreSQL:
		if _, err := c.ExecContext(ctx, `SET enable_seqscan = off`); err != nil {
			t.Fatal(err)
		}
		defer c.ExecContext(context.WithoutCancel(ctx), `RESET enable_seqscan`)
		explain = `EXPLAIN `
		args = []any{time.Now(), 10, time.Time{}}
	}
	rows, err := c.QueryContext(ctx, explain+q, args...)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	cols, _ := rows.Columns()
	var out strings.Builder
	for rows.Next() {
		vals := make([]any, len(cols))
		ptrs := make([]any, len(cols))
		for i := range vals {
			ptrs[i] = &vals[i]
		}
		if err := rows.Scan(ptrs...); err != nil {
			t.Fatal(err)
		}
		for i, v := range vals {
			if b, ok := v.([]byte); ok { // MySQL's text columns
				vals[i] = string(b)
			}
		}
		// MySQL lists the indexes the statement can use (possible_keys)
		// even where a table this small is read whole.
		fmt.Fprintln(&out, vals...)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out.String()
}
