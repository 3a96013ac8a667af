package mysqlstore_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/acemq/msgaudit/idempotency"
	"github.com/acemq/msgaudit/idempotency/mysqlstore"
	"github.com/acemq/msgaudit/internal/testkit/testwait"
)

// nowUS is the store's clock as its statements read it.
const nowUS = `CAST(UNIX_TIMESTAMP(NOW(6)) * 1000000 AS SIGNED)`

// TestMySQLPurgeBoundary: on a session whose clock stands still (SET
// TIMESTAMP), the purge statement deletes the row whose expires_at is the
// server's now (expired: a claim takes such a row over) and keeps the one
// a microsecond later, which IsConfirmed still reports confirmed.
func TestMySQLPurgeBoundary(t *testing.T) {
	s, table := newStore(t, idempotency.Options{PurgeInterval: -1})
	ctx := testwait.Context(t, time.Minute)
	conn, err := openDB(t).Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.ExecContext(ctx, `SET TIMESTAMP = 1700000000.123456`); err != nil {
		t.Fatal(err)
	}
	var now int64
	if err := conn.QueryRowContext(ctx, `SELECT `+nowUS).Scan(&now); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.ExecContext(ctx, "INSERT INTO "+table+" (`key`, state, expires_at) VALUES ('at', 'confirmed', ?), ('after', 'confirmed', ?)", now, now+1); err != nil {
		t.Fatal(err)
	}
	res, err := conn.ExecContext(ctx, mysqlstore.PurgeSQL(s), 100)
	if err != nil {
		t.Fatal(err)
	}
	if n, _ := res.RowsAffected(); n != 1 {
		t.Fatalf("the purge deleted %d rows, want 1 (the row expiring at now)", n)
	}
	var left []string
	rows, err := conn.QueryContext(ctx, "SELECT `key` FROM "+table+" ORDER BY `key`")
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
	if err := conn.QueryRowContext(ctx, mysqlstore.IsConfirmedSQL(s), "after").Scan(&ok); err != nil || !ok {
		t.Fatalf("IsConfirmed of the row kept = %v, %v; want true: a purge must keep what still answers", ok, err)
	}
}

// TestMySQLAutoPurge: with PurgeInterval set, the store deletes its
// expired rows on its own and keeps every key still inside its retention
// (a confirmed key still answers AlreadyConfirmed); PurgeStats counts the
// rows; Close stops the purge and its goroutine.
func TestMySQLAutoPurge(t *testing.T) {
	s, table := newStore(t, idempotency.Options{Retention: time.Hour, PurgeInterval: 10 * time.Millisecond, PurgeBatch: 3})
	ctx := testwait.Context(t, time.Minute)
	key := idempotency.Key{Namespace: "orders", ID: "kept"}
	out, c, err := s.TryClaim(ctx, key)
	if err != nil || out != idempotency.Claimed {
		t.Fatalf("TryClaim = %v, %v", out, err)
	}
	if err := s.Confirm(ctx, c); err != nil {
		t.Fatal(err)
	}
	db := openDB(t)
	const expired = 10
	for i := range expired {
		if _, err := db.ExecContext(ctx, "INSERT INTO "+table+" (`key`, state, expires_at) VALUES (?, 'confirmed', "+nowUS+" - ?)",
			fmt.Sprintf("expired-%d", i), (i+1)*1000000); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := db.ExecContext(ctx, "INSERT INTO "+table+" (`key`, state, expires_at) VALUES ('edge', 'confirmed', "+nowUS+" + 60000000)"); err != nil {
		t.Fatal(err)
	}
	testwait.Until(t, testwait.Long, "the automatic purge of the expired rows", func() bool { return s.PurgeStats().Rows >= expired })
	var left int
	if err := db.QueryRowContext(ctx, "SELECT COUNT(*) FROM "+table).Scan(&left); err != nil || left != 2 {
		t.Fatalf("%d rows left (%v), want 2: the confirmed key and the edge row", left, err)
	}
	if out, _, err := s.TryClaim(ctx, key); err != nil || out != idempotency.AlreadyConfirmed {
		t.Fatalf("TryClaim of the confirmed key after the purge = %v, %v; want already-confirmed", out, err)
	}
	if st := s.PurgeStats(); st.Rows != expired || st.Errors != 0 || st.Runs == 0 {
		t.Fatalf("PurgeStats = %+v; want %d rows, no error", st, expired)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	testwait.Recv(t, mysqlstore.PurgeDone(s), testwait.Long, "the end of the purge goroutine at Close")
}

// TestMySQLPurgeOptions: a negative PurgeBatch is refused.
func TestMySQLPurgeOptions(t *testing.T) {
	_, err := mysqlstore.New(context.Background(), openDB(t), mysqlstore.Options{Options: idempotency.Options{PurgeBatch: -1}})
	if err == nil {
		t.Fatal("New accepted PurgeBatch -1")
	}
}
