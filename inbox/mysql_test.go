package inbox_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/acemq/msgaudit/inbox"
	"github.com/acemq/msgaudit/internal/testkit/pgrestart"
	"github.com/acemq/msgaudit/receiver"
	"github.com/go-sql-driver/mysql"
)

// TestMySQLNewRefuses: a table without transactions (MyISAM), a
// connection that reports found rows instead of changed ones, and keys
// longer than the columns hold are refused at New, each of which would
// let a duplicate run again or fail later.
func TestMySQLNewRefuses(t *testing.T) {
	b := newMySQL(t)
	ctx := context.Background()
	t.Run("MyISAM table", func(t *testing.T) {
		if _, err := b.db.ExecContext(ctx, "CREATE TABLE "+b.table+" (namespace VARBINARY(255) NOT NULL, `key` VARBINARY(255) NOT NULL, recorded_at BIGINT NOT NULL, PRIMARY KEY (namespace, `key`), INDEX "+b.table+"_recorded_at_idx (recorded_at)) ENGINE=MyISAM"); err != nil {
			t.Fatal(err)
		}
		defer b.db.ExecContext(ctx, "DROP TABLE "+b.table)
		_, err := inbox.New(ctx, b.db, inbox.Options{Dialect: inbox.MySQL, Table: b.table})
		if !errors.Is(err, inbox.ErrConfig) || !strings.Contains(err.Error(), "MyISAM") {
			t.Errorf("New on a MyISAM table = %v; want ErrConfig naming the engine", err)
		}
	})
	t.Run("clientFoundRows", func(t *testing.T) {
		cfg := mysqlConfig(t)
		cfg.ClientFoundRows = true
		conn, err := mysql.NewConnector(cfg)
		if err != nil {
			t.Fatal(err)
		}
		db := sql.OpenDB(conn)
		defer db.Close()
		_, err = inbox.New(ctx, db, inbox.Options{Dialect: inbox.MySQL, Table: b.table})
		if !errors.Is(err, inbox.ErrConfig) || !strings.Contains(err.Error(), "clientFoundRows") {
			t.Errorf("New with clientFoundRows=true = %v; want ErrConfig naming it", err)
		}
	})
	t.Run("MaxKeyLength", func(t *testing.T) {
		_, err := inbox.New(ctx, b.db, inbox.Options{Dialect: inbox.MySQL, Table: b.table, MaxKeyLength: 1025})
		if !errors.Is(err, inbox.ErrConfig) || !strings.Contains(err.Error(), "1024 bytes") {
			t.Errorf("New with MaxKeyLength 1025 = %v; want ErrConfig naming the 1,024-byte bound", err)
		}
		if _, err := inbox.New(ctx, b.db, inbox.Options{Dialect: inbox.MySQL, Table: b.table, MaxKeyLength: 1024}); err != nil {
			t.Errorf("New with MaxKeyLength 1024 = %v; want it accepted", err)
		}
	})
}

// holdKey records key in the inbox table under the test queue in a
// transaction of its own that stays open, so InnoDB holds the row's lock,
// until the returned function rolls it back.
func holdKey(t *testing.T, b *backend, key string) func() {
	t.Helper()
	tx, err := b.db.Begin()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec("INSERT INTO "+b.table+" (namespace, `key`, recorded_at) VALUES (?, ?, ?)", testQueue, key, time.Now().UnixNano()); err != nil {
		t.Fatal(err)
	}
	done := false
	release := func() {
		if !done {
			done = true
			_ = tx.Rollback()
		}
	}
	t.Cleanup(release)
	return release
}

// TestMySQLLockWaitTimeout: InnoDB's lock-wait timeout (error 1205) rolls
// back only the statement, not the transaction. A delivery whose INSERT
// times out waiting for another transaction's row is requeued as a lost
// race, its key not recorded and nothing applied; once the other
// transaction rolls back, the redelivery is new work, applied once.
func TestMySQLLockWaitTimeout(t *testing.T) {
	b := newMySQL(t)
	cfg := mysqlConfig(t)
	cfg.Params = map[string]string{"innodb_lock_wait_timeout": "1"}
	ib := b.newInbox(t, inbox.Options{})
	conn, err := mysql.NewConnector(cfg)
	if err != nil {
		t.Fatal(err)
	}
	short := sql.OpenDB(conn)
	t.Cleanup(func() { _ = short.Close() })
	ibShort, err := inbox.New(context.Background(), short, inbox.Options{Dialect: inbox.MySQL, Table: b.table})
	if err != nil {
		t.Fatal(err)
	}
	key := "held-" + randHex(4)
	release := holdKey(t, b, key)
	h := inbox.Handler(func(ctx context.Context, tx *sql.Tx, m *receiver.Message) error { return b.apply(ctx, tx, m.Key, "ok") })
	res := process(t, newReceiver(t, ibShort, nil), msg(key), h)
	if res.Action != receiver.Requeue || res.Ran || !strings.Contains(errString(res.Err), "1205") || !strings.Contains(errString(res.Err), "lost a serialization race") {
		t.Fatalf("delivery behind a held row: %v ran=%v (%s %v); want a requeue naming the lock-wait timeout as a lost race", res.Action, res.Ran, res.Reason, res.Err)
	}
	release()
	if contains(t, ib, key) || b.applied(t, key) != 0 {
		t.Fatal("the timed-out delivery left its key or its effect")
	}
	if res := process(t, newReceiver(t, ib, nil), msg(key), h); res.Action != receiver.Ack || res.Duplicate || b.applied(t, key) != 1 {
		t.Errorf("redelivery: %v duplicate=%v applied %d; want new work applied once", res.Action, res.Duplicate, b.applied(t, key))
	}
}

// TestMySQLContextEndsWhileWaiting: a delivery whose context ends while
// its INSERT waits on another transaction's row is requeued at once, long
// before InnoDB's lock-wait timeout (50 s by default), and its key is not
// recorded. (A batch's first member, as here, gives up its statement
// through the driver, which closes the connection and so rolls the
// transaction back; later members are cancelled on the server with KILL
// QUERY, which keeps the batch's transaction.)
func TestMySQLContextEndsWhileWaiting(t *testing.T) {
	b := newMySQL(t)
	ib := b.newInbox(t, inbox.Options{Lanes: 2})
	key := "held-" + randHex(4)
	release := holdKey(t, b, key)
	defer release()
	r := newReceiver(t, ib, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	t0 := time.Now()
	res := r.Process(ctx, msg(key), inbox.Handler(func(ctx context.Context, tx *sql.Tx, m *receiver.Message) error { return nil }))
	elapsed := time.Since(t0)
	if res.Action != receiver.Requeue || res.Ran {
		t.Fatalf("delivery behind a held row with a 500ms context: %v ran=%v (%s %v); want a requeue", res.Action, res.Ran, res.Reason, res.Err)
	}
	// Functional bound: without the server-side cancel the INSERT would
	// wait for InnoDB's 50 s timeout.
	if elapsed > 20*time.Second {
		t.Errorf("the requeue took %v: the wait was not cancelled", elapsed)
	}
	release()
	if contains(t, ib, key) {
		t.Error("the cancelled delivery's key is recorded")
	}
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// TestMySQLDeadlockRequeuesTheBatch: InnoDB's deadlock (error 1213) rolls
// back the whole transaction of its victim, unlike a lock-wait timeout.
// A batch of two deliveries (Y, then X) deadlocks with another
// transaction that holds X and then wants Y; that transaction is made the
// larger one, so InnoDB picks the batch as the victim. Both deliveries
// are requeued (the first, whose handler had finished, too: its key and
// effect went with the rollback), nothing of the batch is recorded, and
// the redeliveries are applied once each.
func TestMySQLDeadlockRequeuesTheBatch(t *testing.T) {
	b := newMySQL(t)
	ib := b.newInbox(t, inbox.Options{Lanes: 1, MaxBatch: 63, Linger: time.Minute})
	x, y := "x-"+randHex(4), "y-"+randHex(4)
	// The other transaction: many rows (so it is not the victim), and X.
	other, err := b.db.Begin()
	if err != nil {
		t.Fatal(err)
	}
	defer other.Rollback()
	for i := range 50 {
		if _, err := other.Exec("INSERT INTO "+b.table+" (namespace, `key`, recorded_at) VALUES ('ballast', ?, 0)", fmt.Sprint(i)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := other.Exec("INSERT INTO "+b.table+" (namespace, `key`, recorded_at) VALUES (?, ?, 0)", testQueue, x); err != nil {
		t.Fatal(err)
	}
	r := newReceiver(t, ib, nil)
	apply := func(ctx context.Context, tx *sql.Tx, m *receiver.Message) error { return b.apply(ctx, tx, m.Key, "ok") }
	release := make(chan struct{})
	results := make(chan receiver.Result, 2)
	go func() {
		results <- process(t, r, msg(y), inbox.Handler(func(ctx context.Context, tx *sql.Tx, m *receiver.Message) error {
			<-release // until X waits for the lane, so both share the batch
			return apply(ctx, tx, m)
		}))
	}()
	time.Sleep(100 * time.Millisecond) // Y holds the lane
	go func() { results <- process(t, r, msg(x), inbox.Handler(apply)) }()
	time.Sleep(300 * time.Millisecond) // X waits for it
	close(release)
	// X's INSERT then waits for the other transaction's lock on X, while
	// Y's row is the batch's; the other transaction asking for Y closes
	// the cycle.
	time.Sleep(200 * time.Millisecond)
	// Whichever comes first, the cycle closes: the batch holds Y and
	// wants X, the other transaction holds X and wants Y.
	if _, err := other.Exec("INSERT INTO "+b.table+" (namespace, `key`, recorded_at) VALUES (?, ?, 0)", testQueue, y); err != nil {
		t.Fatalf("the other transaction was chosen as the deadlock's victim (%v); the test needs the batch to be", err)
	}
	var sawDeadlock bool
	for range 2 {
		res := <-results
		if res.Action != receiver.Requeue {
			t.Errorf("a delivery of the deadlocked batch: %v (%s %v); want a requeue", res.Action, res.Reason, res.Err)
		}
		if strings.Contains(errString(res.Err), "1213") {
			sawDeadlock = true
		}
	}
	if !sawDeadlock {
		t.Error("no delivery reported the deadlock (error 1213)")
	}
	if err := other.Rollback(); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{x, y} {
		if contains(t, ib, k) || b.applied(t, k) != 0 {
			t.Fatalf("%s: recorded or applied after its batch was rolled back", k)
		}
		if res := process(t, newReceiver(t, ib, nil), msg(k), inbox.Handler(apply)); res.Action != receiver.Ack || res.Duplicate || b.applied(t, k) != 1 {
			t.Errorf("redelivery of %s: %v duplicate=%v applied %d; want applied once", k, res.Action, res.Duplicate, b.applied(t, k))
		}
	}
}

// TestMySQLPacketTooLarge: an effect larger than the server's
// max_allowed_packet (set to 64 KiB on the private MariaDB instance for
// this test) makes MariaDB close the connection, and with it the batch's
// transaction: every delivery of that batch is requeued, none is
// acknowledged without its effect, and the oversized one is never
// recorded; delivered again on their own, the others are applied once.
func TestMySQLPacketTooLarge(t *testing.T) {
	in := pgrestart.OpenMariaDB(t)
	u, err := url.Parse(in.URL)
	if err != nil {
		t.Fatal(err)
	}
	cfg := mysql.NewConfig()
	cfg.User = u.User.Username()
	cfg.Net, cfg.Addr, cfg.DBName = "tcp", u.Host, strings.TrimPrefix(u.Path, "/")
	admin, err := mysql.NewConnector(cfg)
	if err != nil {
		t.Fatal(err)
	}
	adb := sql.OpenDB(admin)
	t.Cleanup(func() { _ = adb.Close() })
	var was int64
	if err := adb.QueryRow("SELECT @@GLOBAL.max_allowed_packet").Scan(&was); err != nil {
		t.Fatal(err)
	}
	if _, err := adb.Exec("SET GLOBAL max_allowed_packet = 65536"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = adb.Exec(fmt.Sprintf("SET GLOBAL max_allowed_packet = %d", was)) })
	conn, err := mysql.NewConnector(cfg) // new connections see the new value
	if err != nil {
		t.Fatal(err)
	}
	db := sql.OpenDB(conn)
	t.Cleanup(func() { _ = db.Close() })
	suffix := randHex(4)
	table, fx := "pkt_inbox_"+suffix, "pkt_fx_"+suffix
	if _, err := db.Exec("CREATE TABLE " + fx + " (id VARCHAR(64) PRIMARY KEY, body LONGBLOB NOT NULL) ENGINE=InnoDB"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, tb := range []string{table, fx} {
			_, _ = adb.Exec("DROP TABLE IF EXISTS " + tb)
		}
	})
	ib, err := inbox.New(context.Background(), db, inbox.Options{Dialect: inbox.MySQL, Table: table, Lanes: 1, MaxBatch: 63, Linger: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	r := newReceiver(t, ib, nil)
	h := inbox.Handler(func(ctx context.Context, tx *sql.Tx, m *receiver.Message) error {
		_, err := tx.ExecContext(ctx, "INSERT INTO "+fx+" (id, body) VALUES (?, ?)", m.Key, m.Body)
		return err
	})
	keys := []string{"small-1", "big", "small-2"}
	results := make(chan receiver.Result, len(keys))
	for _, k := range keys {
		m := msg(k)
		m.Body = []byte(k)
		if k == "big" {
			m.Body = make([]byte, 128<<10)
		}
		go func() { results <- process(t, r, m, h) }()
	}
	for range keys {
		res := <-results
		if res.Action != receiver.Requeue && res.Action != receiver.Ack {
			t.Errorf("a delivery: %v (%s %v); want an ack or a requeue", res.Action, res.Reason, res.Err)
		}
	}
	if contains(t, ib, "big") {
		t.Error("the oversized delivery's key is recorded")
	}
	// The small ones again, alone: applied once each, whether or not
	// they had been committed before.
	for _, k := range []string{"small-1", "small-2"} {
		m := msg(k)
		m.Body = []byte(k)
		if res := process(t, newReceiver(t, ib, nil), m, h); res.Action != receiver.Ack {
			t.Errorf("redelivery of %s: %v (%s %v); want an ack", k, res.Action, res.Reason, res.Err)
		}
	}
	for _, k := range []string{"small-1", "small-2"} {
		var n int
		if err := db.QueryRow("SELECT COUNT(*) FROM "+fx+" WHERE id = ?", k).Scan(&n); err != nil || n != 1 || !contains(t, ib, k) {
			t.Errorf("%s: %d effect rows (%v), recorded %v; want one, recorded", k, n, err, contains(t, ib, k))
		}
	}
}
