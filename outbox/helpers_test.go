package outbox_test

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/acemq/msgaudit/inbox"
	"github.com/acemq/msgaudit/internal/testkit/testenv"
	"github.com/acemq/msgaudit/outbox"
	"github.com/acemq/msgaudit/receiver"
	"github.com/go-sql-driver/mysql"
	_ "github.com/jackc/pgx/v5/stdlib"
	_ "modernc.org/sqlite"
)

func randHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// db is one database the tests run on, with a fresh outbox table name
// that cleanup drops.
type db struct {
	name    string
	dialect inbox.Dialect
	db      *sql.DB
	table   string
	open    func(t testing.TB) *sql.DB // another pool on the same database
	ph      func(n int) string         // placeholder n
	driver  string                     // for another process: sql.Open(driver, dsn)
	dsn     string
}

func sqliteDB(t testing.TB) *db {
	dsn := "file:" + filepath.Join(t.TempDir(), "app.db") + "?_txlock=immediate&_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)"
	d := &db{name: "sqlite", dialect: inbox.SQLite, table: "outbox_" + randHex(4), ph: func(int) string { return "?" }, driver: "sqlite", dsn: dsn}
	d.open = func(t testing.TB) *sql.DB {
		c, err := sql.Open("sqlite", dsn)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
		return c
	}
	d.db = d.open(t)
	return d
}

func postgresDB(t testing.TB) *db {
	raw := testenv.Getenv(t, "MSGAUDIT_POSTGRES_URL", "the PostgreSQL outbox tests need a server")
	d := &db{name: "postgres", dialect: inbox.PostgreSQL, table: "msgaudit_outbox_test_" + randHex(4), ph: func(n int) string { return fmt.Sprintf("$%d", n) }, driver: "pgx", dsn: raw}
	d.open = func(t testing.TB) *sql.DB {
		c, err := sql.Open("pgx", raw)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
		return c
	}
	d.db = d.open(t)
	t.Cleanup(func() { d.drop(t, d.open(t), d.table) })
	return d
}

func mysqlDB(t testing.TB) *db {
	raw := testenv.Getenv(t, "MSGAUDIT_MYSQL_URL", "the MySQL outbox tests need a MySQL or MariaDB server")
	rest, ok := strings.CutPrefix(raw, "mysql://")
	if !ok {
		t.Fatalf("MSGAUDIT_MYSQL_URL %q: want mysql://user[:password]@host:port/database", raw)
	}
	userinfo, hostdb, _ := strings.Cut(rest, "@")
	host, dbname, _ := strings.Cut(hostdb, "/")
	cfg := mysql.NewConfig()
	cfg.User, cfg.Passwd, _ = strings.Cut(userinfo, ":")
	cfg.Net, cfg.Addr, cfg.DBName = "tcp", host, dbname
	d := &db{name: "mysql", dialect: inbox.MySQL, table: "msgaudit_outbox_test_" + randHex(4), ph: func(int) string { return "?" }, driver: "mysql", dsn: cfg.FormatDSN()}
	d.open = func(t testing.TB) *sql.DB {
		c, err := mysql.NewConnector(cfg)
		if err != nil {
			t.Fatal(err)
		}
		p := sql.OpenDB(c)
		t.Cleanup(func() { _ = p.Close() })
		return p
	}
	d.db = d.open(t)
	t.Cleanup(func() { d.drop(t, d.open(t), d.table, d.table+"_keys") })
	return d
}

func (d *db) drop(t testing.TB, c *sql.DB, tables ...string) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, tb := range tables {
		if _, err := c.ExecContext(ctx, `DROP TABLE IF EXISTS `+tb); err != nil {
			t.Errorf("cleanup: drop %s: %v", tb, err)
		}
	}
}

// forEachDB runs f on SQLite, PostgreSQL and MySQL.
func forEachDB(t *testing.T, f func(t *testing.T, d *db)) {
	for _, mk := range []func(testing.TB) *db{sqliteDB, postgresDB, mysqlDB} {
		d := mk(t)
		t.Run(d.name, func(t *testing.T) { f(t, d) })
	}
}

func (d *db) outbox(t testing.TB, o outbox.Options) *outbox.Outbox {
	t.Helper()
	o.Dialect, o.Table = d.dialect, d.table
	ob, err := outbox.New(context.Background(), d.db, o)
	if err != nil {
		t.Fatalf("outbox.New: %v", err)
	}
	t.Cleanup(func() { _ = ob.Close() })
	return ob
}

// send records ms in one transaction and commits it (or rolls it back).
func send(t testing.TB, ob *outbox.Outbox, c *sql.DB, commit bool, ms ...outbox.Message) {
	t.Helper()
	ctx := context.Background()
	tx, err := c.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range ms {
		if err := ob.Send(ctx, tx, m); err != nil {
			_ = tx.Rollback()
			t.Fatalf("Send: %v", err)
		}
	}
	if commit {
		err = tx.Commit()
	} else {
		err = tx.Rollback()
	}
	if err != nil {
		t.Fatal(err)
	}
}

// published is one Publish call.
type published struct {
	id string
	m  outbox.Message
}

// recorder is a Publisher that records what it was given; fail, when set,
// decides a call's outcome (nil: confirmed).
type recorder struct {
	mu    sync.Mutex
	calls []published // every call, failed ones included
	ok    []published // confirmed ones
	fail  func(id string, m outbox.Message) error
}

func (r *recorder) Publish(ctx context.Context, id string, m outbox.Message) error {
	r.mu.Lock()
	fail := r.fail
	r.calls = append(r.calls, published{id, m})
	r.mu.Unlock()
	if fail != nil {
		if err := fail(id, m); err != nil {
			return err
		}
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	r.mu.Lock()
	r.ok = append(r.ok, published{id, m})
	r.mu.Unlock()
	return nil
}

func (r *recorder) confirmed() []published {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]published(nil), r.ok...)
}

// relay runs ob.Run(p) until the test ends.
func relay(t testing.TB, ob *outbox.Outbox, p outbox.Publisher) context.CancelFunc {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- ob.Run(ctx, p) }()
	stop := func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}
	var once sync.Once
	t.Cleanup(func() { once.Do(stop) })
	return func() { once.Do(stop) }
}

// eventually waits up to 20s for cond.
func eventually(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

var errDown = errors.New("connection refused (test)")

// inboxReceiver returns a receiver whose one selector is an inbox on d,
// in table d.table+suffix, dropped at cleanup.
func inboxReceiver(t testing.TB, d *db, suffix string) *receiver.Receiver {
	t.Helper()
	ib, err := inbox.New(context.Background(), d.db, inbox.Options{Dialect: d.dialect, Table: d.table + suffix})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ib.Close(); d.drop(t, d.db, d.table+suffix) })
	r, err := receiver.New(receiver.Config{Selectors: []receiver.Selector{ib}})
	if err != nil {
		t.Fatal(err)
	}
	return r
}
