package inbox_test

import (
	"context"
	"database/sql"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/acemq/msgaudit/inbox"
	"github.com/acemq/msgaudit/internal/inboxsql"
	"github.com/acemq/msgaudit/receiver"
)

// checkFault asserts that a delivery that met a database fault was not
// acknowledged and left neither key nor effect, then that a redelivery once
// the database is back is applied exactly once.
func checkFault(t *testing.T, b *backend, ib *inbox.Inbox, key string, res receiver.Result, heal func()) {
	t.Helper()
	if res.Action == receiver.Ack {
		t.Fatalf("delivery acknowledged despite the fault: %+v", res)
	}
	if res.Action != receiver.Requeue {
		t.Errorf("action %v (%s); want requeue", res.Action, res.Reason)
	}
	heal()
	if contains(t, ib, key) {
		t.Errorf("key recorded although the delivery failed")
	}
	if n := b.applied(t, key); n != 0 {
		t.Errorf("effect applied %d times by a failed delivery; want 0", n)
	}
	res = process(t, newReceiver(t, ib, nil), msg(key), inbox.Handler(func(ctx context.Context, tx *sql.Tx, m *receiver.Message) error {
		return b.apply(ctx, tx, m.Key, "ok")
	}))
	if res.Action != receiver.Ack || b.applied(t, key) != 1 {
		t.Errorf("redelivery after the fault: %v (%s, %v), applied %d; want an ack and 1", res.Action, res.Reason, res.Err, b.applied(t, key))
	}
}

// TestFaultsPostgres cuts the connection to PostgreSQL (a tcpproxy in
// front of it) just as BEGIN, the key's INSERT or COMMIT is sent, and with
// the server unreachable before the delivery: never an ack, nothing
// committed, and the redelivery applies the message once.
func TestFaultsPostgres(t *testing.T) {
	b := newPostgres(t, true)
	ib := b.newInbox(t, inbox.Options{})
	apply := inbox.Handler(func(ctx context.Context, tx *sql.Tx, m *receiver.Message) error {
		return b.apply(ctx, tx, m.Key, "ok")
	})
	heal := func() { b.down(false) }
	for _, at := range []string{"begin", "insert into", "commit"} {
		t.Run("cut at "+at, func(t *testing.T) {
			key := "f-" + randHex(6)
			before := b.trace.fired()
			b.trace.arm(at)
			res := process(t, newReceiver(t, ib, nil), msg(key), apply)
			b.trace.arm("")
			if b.trace.fired() != before+1 {
				heal()
				t.Fatalf("the cut at %q never happened (result %v %s)", at, res.Action, res.Reason)
			}
			checkFault(t, b, ib, key, res, heal)
		})
	}
	t.Run("unreachable", func(t *testing.T) {
		key := "f-" + randHex(6)
		b.down(true)
		b.cut()
		ran := false
		res := process(t, newReceiver(t, ib, nil), msg(key), inbox.Handler(func(ctx context.Context, tx *sql.Tx, m *receiver.Message) error {
			ran = true
			return nil
		}))
		if ran {
			t.Error("the handler ran although the database was unreachable")
		}
		checkFault(t, b, ib, key, res, heal)
	})
}

// TestFaultsSQLite: a closed database at BEGIN, a failing INSERT (a
// trigger), and a competing writer holding the lock past the delivery's
// deadline are requeues; a failing COMMIT is in TestFlow (deferred foreign
// key).
func TestFaultsSQLite(t *testing.T) {
	b := newSQLite(t)
	ib := b.newInbox(t, inbox.Options{})
	apply := inbox.Handler(func(ctx context.Context, tx *sql.Tx, m *receiver.Message) error {
		return b.apply(ctx, tx, m.Key, "ok")
	})
	t.Run("closed database", func(t *testing.T) {
		db := b.open(t)
		closed, err := inbox.New(context.Background(), db, inbox.Options{Dialect: inbox.SQLite, Table: b.table})
		if err != nil {
			t.Fatal(err)
		}
		_ = db.Close()
		key := "f-" + randHex(6)
		res := process(t, newReceiver(t, closed, nil), msg(key), apply)
		checkFault(t, b, ib, key, res, func() {})
	})
	t.Run("insert fails", func(t *testing.T) {
		if _, err := b.db.Exec(`CREATE TRIGGER boom_` + b.table + ` BEFORE INSERT ON ` + b.table +
			` WHEN NEW.key LIKE 'boom-%' BEGIN SELECT RAISE(ABORT, 'insert fails on purpose'); END`); err != nil {
			t.Fatal(err)
		}
		key := "boom-" + randHex(6)
		res := process(t, newReceiver(t, ib, nil), msg(key), apply)
		checkFault(t, b, ib, key, res, func() {
			if _, err := b.db.Exec(`DROP TRIGGER boom_` + b.table); err != nil {
				t.Fatal(err)
			}
		})
	})
	t.Run("lock held past the deadline", func(t *testing.T) {
		c, err := b.db.Conn(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if _, err := c.ExecContext(context.Background(), `BEGIN IMMEDIATE`); err != nil {
			t.Fatal(err)
		}
		key := "f-" + randHex(6)
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		res := newReceiver(t, ib, nil).Process(ctx, msg(key), apply)
		cancel()
		checkFault(t, b, ib, key, res, func() {
			if _, err := c.ExecContext(context.Background(), `ROLLBACK`); err != nil {
				t.Fatal(err)
			}
		})
	})
}

// TestCommitBoundedBySettleTimeout: a COMMIT that waits for a lock (SQLite
// in rollback-journal mode, a reader holding its shared lock, a busy
// timeout of an hour) is given up at the receiver's SettleTimeout: the
// delivery is requeued, nothing committed.
func TestCommitBoundedBySettleTimeout(t *testing.T) {
	path := filepath.Join(t.TempDir(), "journal.db")
	db, err := sql.Open("sqlite", "file:"+path+"?_txlock=immediate&_pragma=busy_timeout(3600000)&_pragma=journal_mode(DELETE)")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	ib, err := inbox.New(context.Background(), db, inbox.Options{Dialect: inbox.SQLite})
	if err != nil {
		t.Fatal(err)
	}
	reader, err := db.Conn(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer reader.Close()
	if _, err := reader.ExecContext(context.Background(), `BEGIN`); err != nil {
		t.Fatal(err)
	}
	var n int
	if err := reader.QueryRowContext(context.Background(), `SELECT count(*) FROM `+inboxsql.DefaultTable).Scan(&n); err != nil {
		t.Fatal(err)
	}
	r := newReceiver(t, ib, func(c *receiver.Config) { c.SettleTimeout = 200 * time.Millisecond })
	done := make(chan receiver.Result, 1)
	go func() {
		done <- r.Process(context.Background(), msg("locked"), inbox.Handler(func(ctx context.Context, tx *sql.Tx, m *receiver.Message) error { return nil }))
	}()
	var res receiver.Result
	select {
	case res = <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("the COMMIT waiting for the reader's lock was not given up at the SettleTimeout")
	}
	if res.Action != receiver.Requeue || !errors.Is(res.Err, inbox.ErrCommit) {
		t.Errorf("result %v (%s, %v); want a requeue with ErrCommit", res.Action, res.Reason, res.Err)
	}
	if _, err := reader.ExecContext(context.Background(), `ROLLBACK`); err != nil {
		t.Fatal(err)
	}
	if contains(t, ib, "locked") {
		t.Error("the key is recorded although its COMMIT was given up")
	}
}
