package crashtest

import (
	"context"
	"database/sql"
	"fmt"

	"net/url"
	"strings"
	"time"

	"github.com/go-sql-driver/mysql"   // the "mysql" database/sql driver
	_ "github.com/jackc/pgx/v5/stdlib" // the "pgx" database/sql driver
	_ "modernc.org/sqlite"             // the "sqlite" database/sql driver
)

// mysqlDSN turns a mysql://user[:password]@host:port/database URL into
// the driver's DSN.
func mysqlDSN(raw string) (string, error) {
	u, err := url.Parse(raw)
	if err != nil || u.Scheme != "mysql" {
		return "", fmt.Errorf("crashtest: MySQL URL %q: want mysql://user[:password]@host:port/database", raw)
	}
	c := mysql.NewConfig()
	c.User = u.User.Username()
	c.Passwd, _ = u.User.Password()
	c.Net, c.Addr = "tcp", u.Host
	c.DBName = strings.TrimPrefix(u.Path, "/")
	c.Timeout = 10 * time.Second
	return c.FormatDSN(), nil
}

// openDB opens the ledger's database with at most conns connections:
// PostgreSQL through pgx's database/sql driver, or an SQLite file in WAL
// mode whose transactions begin IMMEDIATE and wait for a competing writer
// (other connections, other processes) for up to 20 s, as the inbox
// requires.
func openDB(kind, dsn string, conns int) (*sql.DB, error) {
	var db *sql.DB
	var err error
	switch kind {
	case PostgreSQL:
		db, err = sql.Open("pgx", dsn)
	case SQLite:
		db, err = sql.Open("sqlite", dsn+"?_pragma=journal_mode(WAL)&_pragma=busy_timeout(20000)&_pragma=synchronous(FULL)&_txlock=immediate")
	case MySQL:
		db, err = sql.Open("mysql", dsn)
	default:
		return nil, fmt.Errorf("crashtest: unknown database %q", kind)
	}
	if err != nil {
		return nil, fmt.Errorf("crashtest: %s: %w", kind, err)
	}
	db.SetMaxOpenConns(conns)
	db.SetMaxIdleConns(conns)
	return db, nil
}

// ledger is the effect the handlers apply: one row per message key with
// the number of times the message was applied.
type ledger struct {
	db     *sql.DB
	table  string
	apply  string // the upsert, with the key as its one parameter
	key    string // the key column as the statements write it
	create string // the CREATE TABLE
}

func newLedger(db *sql.DB, kind, table string) *ledger {
	if kind == MySQL { // key is a reserved word; keys compare as bytes
		return &ledger{db: db, table: table, key: "`key`",
			apply:  "INSERT INTO " + table + " (`key`, n) VALUES (?, 1) ON DUPLICATE KEY UPDATE n = n + 1",
			create: "CREATE TABLE IF NOT EXISTS " + table + " (`key` VARBINARY(512) PRIMARY KEY, n INTEGER NOT NULL) ENGINE=InnoDB"}
	}
	p := "?"
	if kind == PostgreSQL {
		p = "$1"
	}
	return &ledger{db: db, table: table, key: "key",
		apply:  "INSERT INTO " + table + " (key, n) VALUES (" + p + ", 1) ON CONFLICT (key) DO UPDATE SET n = " + table + ".n + 1",
		create: "CREATE TABLE IF NOT EXISTS " + table + " (key TEXT PRIMARY KEY, n INTEGER NOT NULL)"}
}

// makeTable makes the ledger table.
func (l *ledger) makeTable(ctx context.Context) error {
	_, err := l.db.ExecContext(ctx, l.create)
	if err != nil {
		return fmt.Errorf("crashtest: create ledger %s: %w", l.table, err)
	}
	return nil
}

// drop removes the ledger table.
func (l *ledger) drop(ctx context.Context) error {
	_, err := l.db.ExecContext(ctx, "DROP TABLE IF EXISTS "+l.table)
	return err
}

// execer is what applies the effect: the database or a transaction.
type execer interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
}

// record applies the message with key once more.
func (l *ledger) record(ctx context.Context, e execer, key string) error {
	if _, err := e.ExecContext(ctx, l.apply, key); err != nil {
		return fmt.Errorf("crashtest: ledger %s: %w", l.table, err)
	}
	return nil
}

// counts returns the number of keys applied and of keys applied more than
// once.
func (l *ledger) counts(ctx context.Context) (keys, twice int, err error) {
	err = l.db.QueryRowContext(ctx, "SELECT COUNT(*), COALESCE(SUM(CASE WHEN n > 1 THEN 1 ELSE 0 END), 0) FROM "+l.table).Scan(&keys, &twice)
	if err != nil {
		return 0, 0, fmt.Errorf("crashtest: ledger %s: %w", l.table, err)
	}
	return keys, twice, nil
}

// rows returns every key with its count.
func (l *ledger) rows(ctx context.Context) (map[string]int, error) {
	rs, err := l.db.QueryContext(ctx, "SELECT "+l.key+", n FROM "+l.table)
	if err != nil {
		return nil, fmt.Errorf("crashtest: ledger %s: %w", l.table, err)
	}
	defer rs.Close()
	got := make(map[string]int)
	for rs.Next() {
		var k string
		var n int
		if err := rs.Scan(&k, &n); err != nil {
			return nil, err
		}
		got[k] = n
	}
	return got, rs.Err()
}
