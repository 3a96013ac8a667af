package inbox_test

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"net/url"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/acemq/msgaudit/inbox"
	"github.com/acemq/msgaudit/internal/testkit/tcpproxy"
	"github.com/acemq/msgaudit/internal/testkit/testenv"
	"github.com/acemq/msgaudit/receiver"
	"github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
	_ "modernc.org/sqlite"
)

const testQueue = "/queue/inbox-test"

func randHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// sqliteDSN is the DSN the package documentation asks for.
func sqliteDSN(path string, extra ...string) string {
	q := append([]string{"_txlock=immediate", "_pragma=busy_timeout(10000)", "_pragma=journal_mode(WAL)", "_pragma=foreign_keys(1)"}, extra...)
	return "file:" + path + "?" + strings.Join(q, "&")
}

// backend is one database the inbox tests run against, with its own inbox
// table and an effects table the test handlers write.
type backend struct {
	name    string
	dialect inbox.Dialect
	db      *sql.DB
	table   string // inbox table
	fx      string // effects table: key → applied count
	parent  string // parent of fx's deferred foreign key (commit failures)
	dsn     string // SQLite: the DSN of the file
	open    func(t testing.TB) *sql.DB
	cut     func() // cuts the database connections (nil: not supported)
	down    func(bool)
	trace   *cutter // PostgreSQL through the proxy: cut at a chosen statement
	// MySQL: its connections go through a proxy that cuts the next COMMIT
	// once commitCut is armed (MySQL has no deferred constraint to fail
	// a COMMIT with).
	commitCut *mysqlCommitCut
}

// mysqlCommitCut cuts a connection instead of forwarding its next COMMIT,
// once armed.
type mysqlCommitCut struct {
	mu    sync.Mutex
	armed bool
	hits  int
}

func (c *mysqlCommitCut) arm() {
	c.mu.Lock()
	c.armed = true
	c.mu.Unlock()
}

// splitMySQL cuts a client's stream into MySQL packets: a 3-byte
// little-endian length, a sequence byte, the payload.
func splitMySQL(data []byte, atEOF bool) (int, []byte, error) {
	if len(data) < 4 {
		return 0, nil, nil
	}
	n := 4 + (int(data[0]) | int(data[1])<<8 | int(data[2])<<16)
	if len(data) < n {
		return 0, nil, nil
	}
	return n, data[:n], nil
}

// filter cuts the connection at a COM_QUERY "COMMIT" once armed.
func (c *mysqlCommitCut) filter(p []byte) tcpproxy.Verdict {
	if len(p) > 5 && p[4] == 0x03 && strings.EqualFold(string(p[5:]), "COMMIT") {
		c.mu.Lock()
		defer c.mu.Unlock()
		if c.armed {
			c.armed = false
			c.hits++
			return tcpproxy.Cut
		}
	}
	return tcpproxy.Forward
}

// mysqlConfig returns the driver configuration of MSGAUDIT_MYSQL_URL
// (mysql://user[:password]@host:port/database).
func mysqlConfig(t testing.TB) *mysql.Config {
	t.Helper()
	raw := testenv.Getenv(t, "MSGAUDIT_MYSQL_URL", "the MySQL inbox tests need a MySQL or MariaDB server")
	u, err := url.Parse(raw)
	if err != nil || u.Scheme != "mysql" {
		t.Fatalf("MSGAUDIT_MYSQL_URL %q: want mysql://user[:password]@host:port/database", raw)
	}
	cfg := mysql.NewConfig()
	cfg.User = u.User.Username()
	cfg.Passwd, _ = u.User.Password()
	cfg.Net, cfg.Addr = "tcp", u.Host
	cfg.DBName = strings.TrimPrefix(u.Path, "/")
	cfg.Timeout = 5 * time.Second
	return cfg
}

// newMySQL returns a MySQL backend on MSGAUDIT_MYSQL_URL through a proxy
// that can cut a COMMIT. Tables are dropped at cleanup.
func newMySQL(t testing.TB) *backend {
	t.Helper()
	cfg := mysqlConfig(t)
	suffix := randHex(4)
	b := &backend{name: "mysql", dialect: inbox.MySQL, table: "msgaudit_inbox_test_" + suffix,
		fx: "msgaudit_inbox_fx_" + suffix, parent: "msgaudit_inbox_parent_" + suffix, commitCut: &mysqlCommitCut{}}
	b.dsn = cfg.FormatDSN()
	proxy, err := tcpproxy.New(cfg.Addr, tcpproxy.Options{Split: splitMySQL, Filter: b.commitCut.filter})
	if err != nil {
		t.Fatalf("tcpproxy: %v", err)
	}
	t.Cleanup(proxy.Close)
	b.cut = func() { proxy.Cut() }
	b.down = proxy.SetDown
	b.open = func(t testing.TB) *sql.DB {
		c := cfg.Clone()
		c.Addr = proxy.Addr()
		conn, err := mysql.NewConnector(c)
		if err != nil {
			t.Fatal(err)
		}
		db := sql.OpenDB(conn)
		t.Cleanup(func() { _ = db.Close() })
		return db
	}
	b.db = b.open(t)
	if _, err := b.db.ExecContext(context.Background(), "CREATE TABLE "+b.fx+" (`key` VARCHAR(255) PRIMARY KEY, n INTEGER NOT NULL, parent VARCHAR(16) NOT NULL) ENGINE=InnoDB"); err != nil {
		t.Fatalf("mysql: creating %s: %v", b.fx, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		conn, err := mysql.NewConnector(cfg)
		if err != nil {
			t.Errorf("cleanup: %v", err)
			return
		}
		db := sql.OpenDB(conn)
		defer db.Close()
		for _, tb := range []string{b.table, b.fx} {
			if _, err := db.ExecContext(ctx, `DROP TABLE IF EXISTS `+tb); err != nil {
				t.Errorf("cleanup: drop %s: %v", tb, err)
			}
		}
	})
	return b
}

// ph returns the i-th (1-based) placeholder.
func (b *backend) ph(i int) string {
	switch b.dialect {
	case inbox.PostgreSQL:
		return fmt.Sprintf("$%d", i)
	case inbox.MySQL:
		return "?"
	}
	return fmt.Sprintf("?%d", i)
}

// setupFX creates the effects table: applying a message increments its
// key's count, so a double apply shows as 2. A row whose parent is "bad"
// violates a deferred foreign key, which fails the COMMIT.
func (b *backend) setupFX(t testing.TB) {
	t.Helper()
	ctx := context.Background()
	deferrable := "DEFERRABLE INITIALLY DEFERRED"
	for _, q := range []string{
		`CREATE TABLE ` + b.parent + ` (id TEXT PRIMARY KEY)`,
		`INSERT INTO ` + b.parent + ` (id) VALUES ('ok')`,
		`CREATE TABLE ` + b.fx + ` (key TEXT PRIMARY KEY, n INTEGER NOT NULL, parent TEXT NOT NULL REFERENCES ` + b.parent + ` (id) ` + deferrable + `)`,
	} {
		if _, err := b.db.ExecContext(ctx, q); err != nil {
			t.Fatalf("%s: %s: %v", b.name, q, err)
		}
	}
}

// apply is the test's effect: count one application of key. parent "bad"
// makes the COMMIT fail (on MySQL by cutting the connection instead of
// sending it: the outcome is unknown to the client, and the server rolls
// the transaction back).
func (b *backend) apply(ctx context.Context, tx *sql.Tx, key, parent string) error {
	if b.dialect == inbox.MySQL {
		if parent == "bad" {
			b.commitCut.arm()
		}
		_, err := tx.ExecContext(ctx, "INSERT INTO "+b.fx+" (`key`, n, parent) VALUES (?, 1, ?) ON DUPLICATE KEY UPDATE n = n + 1", key, parent)
		return err
	}
	_, err := tx.ExecContext(ctx, `INSERT INTO `+b.fx+` (key, n, parent) VALUES (`+b.ph(1)+`, 1, `+b.ph(2)+`)
		ON CONFLICT (key) DO UPDATE SET n = `+b.fx+`.n + 1`, key, parent)
	return err
}

// applied returns how often key's effect was committed.
func (b *backend) applied(t testing.TB, key string) int {
	t.Helper()
	var n int
	col := "key"
	if b.dialect == inbox.MySQL {
		col = "`key`"
	}
	err := b.db.QueryRowContext(context.Background(), `SELECT n FROM `+b.fx+` WHERE `+col+` = `+b.ph(1), key).Scan(&n)
	if errors.Is(err, sql.ErrNoRows) {
		return 0
	}
	if err != nil {
		t.Fatalf("%s: reading effect of %q: %v", b.name, key, err)
	}
	return n
}

// newInbox returns an Inbox on b with o (Dialect and Table filled in).
func (b *backend) newInbox(t testing.TB, o inbox.Options) *inbox.Inbox {
	t.Helper()
	o.Dialect = b.dialect
	if o.Table == "" {
		o.Table = b.table
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ib, err := inbox.New(ctx, b.db, o)
	if err != nil {
		t.Fatalf("%s: inbox.New: %v", b.name, err)
	}
	return ib
}

// contains reports whether key is recorded in ib under the test queue.
func contains(t testing.TB, ib *inbox.Inbox, key string) bool {
	t.Helper()
	ok, err := ib.Contains(context.Background(), testQueue, key)
	if err != nil {
		t.Fatalf("Contains(%q): %v", key, err)
	}
	return ok
}

func newSQLite(t testing.TB) *backend {
	t.Helper()
	dir := t.TempDir()
	path := filepath.Join(dir, "inbox.db")
	b := &backend{name: "sqlite", dialect: inbox.SQLite, table: "inbox_" + randHex(4),
		fx: "fx_" + randHex(4), parent: "parent_" + randHex(4)}
	b.dsn = sqliteDSN(path)
	b.open = func(t testing.TB) *sql.DB {
		db, err := sql.Open("sqlite", b.dsn)
		if err != nil {
			t.Fatalf("sqlite: %v", err)
		}
		t.Cleanup(func() { _ = db.Close() })
		return db
	}
	b.db = b.open(t)
	b.setupFX(t)
	return b
}

// cutter cuts the proxy's connections when a statement starting with
// prefix (case-insensitive) is about to be sent, once per arm.
type cutter struct {
	mu     sync.Mutex
	prefix string
	proxy  *tcpproxy.Proxy
	hits   int
}

func (c *cutter) arm(prefix string) {
	c.mu.Lock()
	c.prefix = strings.ToLower(prefix)
	c.mu.Unlock()
}

func (c *cutter) fired() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.hits
}

func (c *cutter) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.prefix != "" && strings.HasPrefix(strings.ToLower(strings.TrimSpace(d.SQL)), c.prefix) {
		c.prefix = ""
		c.hits++
		c.proxy.SetDown(true)
		c.proxy.Cut()
	}
	return ctx
}

func (c *cutter) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// newPostgres returns a PostgreSQL backend on MSGAUDIT_POSTGRES_URL; with
// proxied, its connections go through a tcpproxy the test can cut. Tables
// are dropped at cleanup.
func newPostgres(t testing.TB, proxied bool) *backend {
	t.Helper()
	raw := testenv.Getenv(t, "MSGAUDIT_POSTGRES_URL", "the PostgreSQL inbox tests need a server")
	suffix := randHex(4)
	b := &backend{name: "postgres", dialect: inbox.PostgreSQL, table: "msgaudit_inbox_test_" + suffix,
		fx: "msgaudit_inbox_fx_" + suffix, parent: "msgaudit_inbox_parent_" + suffix}
	var proxy *tcpproxy.Proxy
	if proxied {
		cfg, err := pgx.ParseConfig(raw)
		if err != nil {
			t.Fatalf("MSGAUDIT_POSTGRES_URL: %v", err)
		}
		proxy, err = tcpproxy.New(fmt.Sprintf("%s:%d", cfg.Host, cfg.Port), tcpproxy.Options{})
		if err != nil {
			t.Fatalf("tcpproxy: %v", err)
		}
		t.Cleanup(proxy.Close)
		b.trace = &cutter{proxy: proxy}
		b.cut = func() { proxy.Cut() }
		b.down = proxy.SetDown
	}
	b.open = func(t testing.TB) *sql.DB {
		cfg, err := pgx.ParseConfig(raw)
		if err != nil {
			t.Fatalf("MSGAUDIT_POSTGRES_URL: %v", err)
		}
		if proxy != nil {
			host, port, _ := strings.Cut(proxy.Addr(), ":")
			cfg.Host = host
			fmt.Sscan(port, &cfg.Port)
			cfg.Tracer = b.trace
			cfg.ConnectTimeout = 5 * time.Second
		}
		db := stdlib.OpenDB(*cfg)
		t.Cleanup(func() { _ = db.Close() })
		return db
	}
	b.db = b.open(t)
	b.setupFX(t)
	// Cleanup runs last-registered first: drop the tables on a fresh,
	// direct connection after the test's pools are closed.
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		db, err := sql.Open("pgx", raw)
		if err != nil {
			t.Errorf("cleanup: %v", err)
			return
		}
		defer db.Close()
		for _, tb := range []string{b.table, b.fx, b.parent} {
			if _, err := db.ExecContext(ctx, `DROP TABLE IF EXISTS `+tb); err != nil {
				t.Errorf("cleanup: drop %s: %v", tb, err)
			}
		}
	})
	return b
}

// backends returns the backends a test runs against: SQLite always,
// PostgreSQL when MSGAUDIT_POSTGRES_URL is set (skipped otherwise, failed
// in CI).
func forEachBackend(t *testing.T, f func(t *testing.T, newBackend func(t testing.TB) *backend)) {
	t.Run("sqlite", func(t *testing.T) { f(t, newSQLite) })
	t.Run("postgres", func(t *testing.T) { f(t, func(t testing.TB) *backend { return newPostgres(t, false) }) })
	t.Run("mysql", func(t *testing.T) { f(t, newMySQL) })
}

// msg is a delivery of key on the test queue.
func msg(key string) *receiver.Message {
	return &receiver.Message{Key: key, Destination: testQueue, Consumer: "c1"}
}

// newReceiver returns a receiver whose only durable tier is ib (a fresh
// memory tier: a restarted process).
func newReceiver(t testing.TB, ib *inbox.Inbox, mod func(*receiver.Config)) *receiver.Receiver {
	t.Helper()
	cfg := receiver.Config{Selectors: []receiver.Selector{ib}, MaxAttempts: 1000}
	if mod != nil {
		mod(&cfg)
	}
	r, err := receiver.New(cfg)
	if err != nil {
		t.Fatalf("receiver.New: %v", err)
	}
	return r
}

// process runs one delivery with a 30 s deadline.
func process(t testing.TB, r *receiver.Receiver, m *receiver.Message, h receiver.Handler) receiver.Result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return r.Process(ctx, m, h)
}
