package pgstore_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/acemq/msgaudit/idempotency"
	"github.com/acemq/msgaudit/idempotency/pgstore"
	"github.com/acemq/msgaudit/internal/testkit/testwait"
)

// TestPostgresPurgeBoundary: in one transaction, where now() stands still,
// the purge statement deletes the row whose expires_at is now() (expired:
// TryClaim takes such a row over) and keeps the one a microsecond later,
// which IsConfirmed still reports confirmed.
func TestPostgresPurgeBoundary(t *testing.T) {
	p, pool, table := newPostgresTestStore(t, idempotency.Options{PurgeInterval: -1}, nil, 0)
	ctx := testwait.Context(t, time.Minute)
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx))
	tb := pgx.Identifier{table}.Sanitize()
	if _, err := tx.Exec(ctx, `INSERT INTO `+tb+` (key, state, expires_at) VALUES
		('at', 'confirmed', now()), ('after', 'confirmed', now() + interval '1 microsecond')`); err != nil {
		t.Fatal(err)
	}
	var n int64
	var last *time.Time
	if err := tx.QueryRow(ctx, pgstore.PurgeSQL(p), 100, time.Time{}).Scan(&n, &last); err != nil {
		t.Fatal(err)
	}
	if n != 1 {
		t.Fatalf("the purge deleted %d rows, want 1 (the row expiring at now())", n)
	}
	var left []string
	rows, err := tx.Query(ctx, `SELECT key FROM `+tb+` ORDER BY key`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var k string
		if err := rows.Scan(&k); err != nil {
			t.Fatal(err)
		}
		left = append(left, k)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(left) != "[after]" {
		t.Fatalf("rows left %v, want [after]", left)
	}
	var ok bool
	if err := tx.QueryRow(ctx, pgstore.IsConfirmedSQL(p), "after").Scan(&ok); err != nil || !ok {
		t.Fatalf("IsConfirmed of the row kept = %v, %v; want true: a purge must keep what still answers", ok, err)
	}
}

// TestPostgresAutoPurge: with PurgeInterval set, the store deletes its
// expired rows on its own and keeps every key still inside its retention
// (a confirmed key still answers AlreadyConfirmed); PurgeStats counts the
// rows; Close stops the purge and leaves no goroutine behind.
func TestPostgresAutoPurge(t *testing.T) {
	// The table exists before the purging store starts: New does no I/O,
	// and a purge before Migrate would fail on the missing table.
	_, pool, table := newPostgresTestStore(t, idempotency.Options{PurgeInterval: -1}, nil, 0)
	ctx := testwait.Context(t, time.Minute)
	p, err := pgstore.New(ctx, pool, pgstore.Options{Options: idempotency.Options{Retention: time.Hour, PurgeInterval: 10 * time.Millisecond, PurgeBatch: 3}, Table: table})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	key := idempotency.Key{Namespace: "orders", ID: "kept"}
	out, c, err := p.TryClaim(ctx, key)
	if err != nil || out != idempotency.Claimed {
		t.Fatalf("TryClaim = %v, %v", out, err)
	}
	if err := p.Confirm(ctx, c); err != nil {
		t.Fatal(err)
	}
	tb := pgx.Identifier{table}.Sanitize()
	const expired = 10
	if _, err := pool.Exec(ctx, `INSERT INTO `+tb+` (key, state, expires_at)
		SELECT 'expired-' || g, 'confirmed', now() - g * interval '1 second' FROM generate_series(1, $1::int) g`, expired); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `INSERT INTO `+tb+` (key, state, expires_at) VALUES ('edge', 'confirmed', now() + interval '1 minute')`); err != nil {
		t.Fatal(err)
	}
	testwait.Until(t, testwait.Long, "the automatic purge of the expired rows", func() bool { return p.PurgeStats().Rows >= expired })
	var left int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM `+tb).Scan(&left); err != nil || left != 2 {
		t.Fatalf("%d rows left (%v), want 2: the confirmed key and the edge row", left, err)
	}
	if out, _, err := p.TryClaim(ctx, key); err != nil || out != idempotency.AlreadyConfirmed {
		t.Fatalf("TryClaim of the confirmed key after the purge = %v, %v; want already-confirmed", out, err)
	}
	if st := p.PurgeStats(); st.Rows != expired || st.Errors != 0 || st.Runs == 0 {
		t.Fatalf("PurgeStats = %+v; want %d rows, no error", st, expired)
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	testwait.Recv(t, pgstore.PurgeDone(p), testwait.Long, "the end of the purge goroutine at Close")
}
