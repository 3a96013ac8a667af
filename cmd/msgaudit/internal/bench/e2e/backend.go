package e2e

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"

	"github.com/acemq/msgaudit/idempotency"
	"github.com/acemq/msgaudit/idempotency/pgstore"
	"github.com/acemq/msgaudit/idempotency/redisstore"
	"github.com/acemq/msgaudit/idempotency/sqlitestore"
	"github.com/acemq/msgaudit/inbox"
	"github.com/acemq/msgaudit/internal/mysqlurl"
	"github.com/acemq/msgaudit/internal/redact"
	"github.com/acemq/msgaudit/receiver"
	"github.com/go-sql-driver/mysql"
	_ "github.com/jackc/pgx/v5/stdlib" // the "pgx" database/sql driver, for the PostgreSQL inbox
	"github.com/redis/go-redis/v9"
	_ "modernc.org/sqlite" // the "sqlite" database/sql driver, for the SQLite inbox
)

// backend is a variant's durable tier: an idempotency store or an inbox
// (neither for the audit-only variant), with what removes it again.
type backend struct {
	store idempotency.Store
	inbox receiver.Inbox
	// counting wraps a counting function into the variant's handler.
	handler func(count func()) receiver.Handler
	close   func(ctx context.Context) error
	// apply commits the effect of one message on its own (autocommit):
	// the bare client's handler in the effect variants; nil elsewhere.
	apply func(ctx context.Context, key string, body []byte) error
}

// plainHandler counts and succeeds.
func plainHandler(count func()) receiver.Handler {
	return func(context.Context, *receiver.Message) error { count(); return nil }
}

// inboxHandler counts in the inbox's transaction and succeeds (the inbox
// then commits the key).
func inboxHandler(count func()) receiver.Handler {
	return inbox.Handler(func(context.Context, *sql.Tx, *receiver.Message) error { count(); return nil })
}

// withQuery returns raw with the query parameter key set to value.
func withQuery(raw, key, value string) (string, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return "", fmt.Errorf("parsing %s: %w", redact.URL(raw), err)
	}
	q := u.Query()
	q.Set(key, value)
	u.RawQuery = q.Encode()
	return u.String(), nil
}

// sqliteFiles removes a SQLite database and its WAL files.
func sqliteFiles(path string) error {
	var errs []error
	for _, suffix := range []string{"", "-wal", "-shm"} {
		if err := os.Remove(path + suffix); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// dropTable drops a PostgreSQL table.
func (p *plan) dropTable(ctx context.Context, table string) error {
	db, err := sql.Open("pgx", p.PostgresURL)
	if err != nil {
		return err
	}
	defer db.Close()
	_, err = db.ExecContext(ctx, `DROP TABLE IF EXISTS "`+table+`"`)
	return err
}

// openBackend opens a fresh store or inbox for one measurement: its own
// PostgreSQL table, Redis key prefix or SQLite file.
func (p *plan) openBackend(ctx context.Context, k kind, n names) (*backend, error) {
	be := &backend{handler: plainHandler, close: func(context.Context) error { return nil }}
	switch k {
	case auditOnly:
	case memoryStore:
		m, err := idempotency.NewMemory(idempotency.Options{})
		if err != nil {
			return nil, err
		}
		be.store = m
		be.close = func(context.Context) error { return m.Close() }
	case redisStore:
		prefix := "msgaudit:" + n.ident + ":"
		raw, err := withQuery(p.RedisURL, "msgaudit_prefix", prefix)
		if err != nil {
			return nil, err
		}
		s, err := redisstore.Open(ctx, raw, redisstore.Options{})
		if err != nil {
			return nil, err
		}
		be.store = s
		be.close = func(ctx context.Context) error {
			return errors.Join(s.Close(), p.deleteRedisPrefix(ctx, prefix))
		}
	case postgresStore:
		raw, err := withQuery(p.PostgresURL, "msgaudit_table", n.ident)
		if err != nil {
			return nil, err
		}
		s, err := pgstore.Open(ctx, raw, pgstore.Options{})
		if err != nil {
			return nil, err
		}
		be.store = s
		be.close = func(ctx context.Context) error {
			return errors.Join(s.Close(), p.dropTable(ctx, n.ident))
		}
	case sqliteStore, sqliteStoreFull:
		// The store's default, synchronous=NORMAL (a commit survives a
		// crash of the process), or FULL (a power loss too: one disk sync
		// per commit).
		sync := sqlitestore.SyncNormal
		if k == sqliteStoreFull {
			sync = sqlitestore.SyncFull
		}
		path := filepath.Join(p.Dir, n.ident+".db")
		s, err := sqlitestore.Open(ctx, path, sqlitestore.Options{Synchronous: sync})
		if err != nil {
			return nil, err
		}
		be.store = s
		be.close = func(context.Context) error { return errors.Join(s.Close(), sqliteFiles(path)) }
	case inboxSQLite:
		path := filepath.Join(p.Dir, n.ident+".db")
		// The inbox's documented SQLite settings, with synchronous=FULL
		// like the sqlite-full store variant, so that both make the same
		// promise.
		db, err := sql.Open("sqlite", "file:"+path+"?_txlock=immediate&_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)&_pragma=synchronous(FULL)")
		if err != nil {
			return nil, err
		}
		db.SetMaxOpenConns(2 * p.Concurrency)
		db.SetMaxIdleConns(2 * p.Concurrency) // database/sql keeps 2 by default and closes the rest after every transaction
		ib, err := inbox.New(ctx, db, inbox.Options{Dialect: inbox.SQLite, MaxBatch: p.InboxBatch, Linger: p.InboxLinger})
		if err != nil {
			db.Close()
			return nil, err
		}
		be.inbox, be.handler = ib, inboxHandler
		be.close = func(context.Context) error { return errors.Join(db.Close(), sqliteFiles(path)) }
	case inboxPostgres:
		db, err := sql.Open("pgx", p.PostgresURL)
		if err != nil {
			return nil, err
		}
		db.SetMaxOpenConns(2 * p.Concurrency)
		db.SetMaxIdleConns(2 * p.Concurrency) // database/sql keeps 2 by default and closes the rest after every transaction
		ib, err := inbox.New(ctx, db, inbox.Options{Dialect: inbox.PostgreSQL, Table: n.ident, MaxBatch: p.InboxBatch, Linger: p.InboxLinger})
		if err != nil {
			db.Close()
			return nil, errors.Join(err, p.dropTable(ctx, n.ident))
		}
		be.inbox, be.handler = ib, inboxHandler
		be.close = func(ctx context.Context) error { return errors.Join(db.Close(), p.dropTable(ctx, n.ident)) }
	case bareEffectPostgres, inboxEffectPostgres, bareEffectMySQL, inboxEffectMySQL, bareInboxPostgres, bareInboxMySQL:
		return p.effectBackend(ctx, k, n)
	default:
		return nil, fmt.Errorf("e2e: no backend for kind %d", k)
	}
	return be, nil
}

// effectBackend opens the database of an effect variant with a table of
// its own that receives one row per message (its key and body): a bare
// client INSERTs with autocommit, the inbox variant in the inbox's
// transaction, with the inbox table on the same database.
func (p *plan) effectBackend(ctx context.Context, k kind, n names) (*backend, error) {
	var (
		db      *sql.DB
		err     error
		dialect inbox.Dialect
		insert  string
		mark    string // the hand-written inbox row: affects 0 rows for a recorded key
		quote   = func(s string) string { return `"` + s + `"` }
	)
	fx := "fx_" + n.ident
	switch k.effectDB() {
	case "postgres":
		db, err = sql.Open("pgx", p.PostgresURL)
		dialect = inbox.PostgreSQL
		insert = `INSERT INTO ` + quote(fx) + ` (id, body) VALUES ($1, $2)`
		mark = `INSERT INTO ` + quote(n.ident) + ` (id) VALUES ($1) ON CONFLICT (id) DO NOTHING`
	case "mysql":
		var cfg *mysql.Config
		if cfg, err = mysqlurl.Config(p.MySQLURL); err == nil {
			var conn driver.Connector
			if conn, err = mysql.NewConnector(cfg); err == nil {
				db = sql.OpenDB(conn)
			}
		}
		dialect = inbox.MySQL
		quote = func(s string) string { return "`" + s + "`" }
		insert = `INSERT INTO ` + quote(fx) + ` (id, body) VALUES (?, ?)`
		mark = `INSERT INTO ` + quote(n.ident) + ` (id) VALUES (?) ON DUPLICATE KEY UPDATE id = id`
	}
	if err != nil {
		return nil, err
	}
	db.SetMaxOpenConns(2 * p.Concurrency)
	db.SetMaxIdleConns(2 * p.Concurrency)
	drop := func(ctx context.Context) error {
		_, err1 := db.ExecContext(ctx, `DROP TABLE IF EXISTS `+quote(fx))
		_, err2 := db.ExecContext(ctx, `DROP TABLE IF EXISTS `+quote(n.ident))
		return errors.Join(err1, err2, db.Close())
	}
	if _, err := db.ExecContext(ctx, `CREATE TABLE `+quote(fx)+` (id VARCHAR(255) PRIMARY KEY, body TEXT NOT NULL)`); err != nil {
		return nil, errors.Join(err, drop(ctx))
	}
	be := &backend{close: drop}
	if k == bareInboxPostgres || k == bareInboxMySQL {
		if _, err := db.ExecContext(ctx, `CREATE TABLE `+quote(n.ident)+` (id VARCHAR(255) PRIMARY KEY)`); err != nil {
			return nil, errors.Join(err, drop(ctx))
		}
		be.handler = plainHandler
		be.apply = func(ctx context.Context, key string, body []byte) error {
			tx, err := db.BeginTx(ctx, nil)
			if err != nil {
				return err
			}
			defer tx.Rollback() //nolint:errcheck // after Commit it is a no-op
			res, err := tx.ExecContext(ctx, mark, key)
			if err != nil {
				return err
			}
			if n, err := res.RowsAffected(); err != nil || n == 0 {
				return err // a recorded key: applied before, ack it again
			}
			if _, err := tx.ExecContext(ctx, insert, key, string(body)); err != nil {
				return err
			}
			return tx.Commit()
		}
		return be, nil
	}
	if k.isBare() {
		be.handler = plainHandler
		be.apply = func(ctx context.Context, key string, body []byte) error {
			_, err := db.ExecContext(ctx, insert, key, string(body))
			return err
		}
		return be, nil
	}
	ib, err := inbox.New(ctx, db, inbox.Options{Dialect: dialect, Table: n.ident, MaxBatch: p.InboxBatch, Linger: p.InboxLinger})
	if err != nil {
		return nil, errors.Join(err, drop(ctx))
	}
	be.inbox = ib
	be.handler = func(count func()) receiver.Handler {
		return inbox.Handler(func(ctx context.Context, tx *sql.Tx, m *receiver.Message) error {
			if _, err := tx.ExecContext(ctx, insert, m.Key, string(m.Body)); err != nil {
				return err
			}
			count()
			return nil
		})
	}
	return be, nil
}

// deleteRedisPrefix deletes every key under prefix.
func (p *plan) deleteRedisPrefix(ctx context.Context, prefix string) error {
	opt, err := redis.ParseURL(p.RedisURL)
	if err != nil {
		return fmt.Errorf("parsing %s: %w", redact.URL(p.RedisURL), err)
	}
	c := redis.NewClient(opt)
	defer c.Close()
	it := c.Scan(ctx, 0, prefix+"*", 1000).Iterator()
	var batch []string
	for it.Next(ctx) {
		batch = append(batch, it.Val())
		if len(batch) == 1000 {
			if err := c.Unlink(ctx, batch...).Err(); err != nil {
				return err
			}
			batch = batch[:0]
		}
	}
	if err := it.Err(); err != nil {
		return err
	}
	if len(batch) > 0 {
		return c.Unlink(ctx, batch...).Err()
	}
	return nil
}

// groupsStore reports whether Options.StoreBatch or StoreLinger is set.
func (p *plan) groupsStore() bool { return p.StoreBatch != 0 || p.StoreLinger != 0 }

// pipeline returns the duplicate pipeline's configuration of a variant:
// its store or inbox (or neither: the audit-only variant, memory only on
// purpose), with Options.StoreBatch and StoreLinger when groupsStore, and
// every other field at its default.
func (p *plan) pipeline(be *backend, audit receiver.Auditor, cnt *counter) receiver.Config {
	c := receiver.Config{Audit: audit, Store: be.store, Inbox: be.inbox,
		MemoryOnly: be.store == nil && be.inbox == nil}
	if cnt.lat != nil {
		c.Observer = cnt.lat
	}
	if be.store != nil && p.groupsStore() {
		c.StoreBatch, c.StoreLinger = p.StoreBatch, p.StoreLinger
	}
	return c
}
