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
	"github.com/acemq/msgaudit/inbox/pgxinbox"
	"github.com/acemq/msgaudit/internal/mysqlurl"
	"github.com/acemq/msgaudit/internal/redact"
	"github.com/acemq/msgaudit/outbox"
	"github.com/acemq/msgaudit/receiver"
	"github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
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
	// effect is the effect variants' table, checked after the run; nil
	// elsewhere.
	effect *effectTable
	// outbox is the consumer's Config.Outbox in the outbox's send
	// measurement, its handler's messages going to sendTo (set by
	// measure); drained waits until the outbox holds no message. nil
	// elsewhere.
	outbox  *outbox.Outbox
	sendTo  string
	drained func(ctx context.Context) error
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
	default:
		if k.effectDB() != "" {
			return p.effectBackend(ctx, k, n)
		}
		return nil, fmt.Errorf("e2e: no backend for kind %d", k)
	}
	return be, nil
}

// effectTable is the table of an effect variant in the user's database:
// one row per message, its key (the primary key) and its body.
type effectTable struct {
	db     *sql.DB
	table  string
	quote  func(string) string // quotes an identifier
	insert string              // INSERTs one row: key, body
	// close drops the effect's and the inbox's tables (or removes the
	// SQLite file) and closes db.
	close func(ctx context.Context) error
}

// exec INSERTs the row of one message with autocommit.
func (e *effectTable) exec(ctx context.Context, key string, body []byte) error {
	_, err := e.db.ExecContext(ctx, e.insert, key, string(body))
	return err
}

// check counts the table's rows and distinct keys and fails unless both are
// want, one row per message: the primary key forbids a second row of a
// key, so a count short of want is a lost effect. It returns the rows.
func (e *effectTable) check(ctx context.Context, want int) (int, error) {
	var rows, keys int
	if err := e.db.QueryRowContext(ctx, `SELECT COUNT(*), COUNT(DISTINCT id) FROM `+e.quote(e.table)).Scan(&rows, &keys); err != nil {
		return 0, fmt.Errorf("counting the effect table's rows: %w", err)
	}
	if rows != want || keys != want {
		return rows, fmt.Errorf("the effect table holds %d rows with %d distinct keys, want one per message (%d)", rows, keys, want)
	}
	return rows, nil
}

// openEffect opens the effect's database (db: "postgres", "mysql" or
// "sqlite") and creates the effect's table, "fx_" and the measurement's
// identifier; the inbox of the same measurement, if any, takes the
// identifier itself on the same database.
func (p *plan) openEffect(ctx context.Context, db string, n names) (*effectTable, error) {
	e := &effectTable{table: "fx_" + n.ident, quote: func(s string) string { return `"` + s + `"` }}
	var err error
	switch db {
	case "postgres":
		e.db, err = sql.Open("pgx", p.PostgresURL)
		e.insert = `INSERT INTO ` + e.quote(e.table) + ` (id, body) VALUES ($1, $2)`
	case "mysql":
		var cfg *mysql.Config
		if cfg, err = mysqlurl.Config(p.MySQLURL); err == nil {
			var conn driver.Connector
			if conn, err = mysql.NewConnector(cfg); err == nil {
				e.db = sql.OpenDB(conn)
			}
		}
		e.quote = func(s string) string { return "`" + s + "`" }
		e.insert = `INSERT INTO ` + e.quote(e.table) + ` (id, body) VALUES (?, ?)`
	case "sqlite":
		// The settings of the inbox-sqlite variant (synchronous=FULL: a
		// commit survives a power loss), for the bare client too, so that
		// both make the same promise.
		path := filepath.Join(p.Dir, n.ident+".db")
		e.db, err = sql.Open("sqlite", "file:"+path+"?_txlock=immediate&_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)&_pragma=synchronous(FULL)")
		e.insert = `INSERT INTO ` + e.quote(e.table) + ` (id, body) VALUES (?, ?)`
		if err == nil {
			sdb := e.db
			e.close = func(context.Context) error { return errors.Join(sdb.Close(), sqliteFiles(path)) }
		}
	default:
		return nil, fmt.Errorf("e2e: no effect database %q", db)
	}
	if err != nil {
		return nil, err
	}
	e.db.SetMaxOpenConns(2 * p.Concurrency)
	e.db.SetMaxIdleConns(2 * p.Concurrency) // database/sql keeps 2 by default and closes the rest after every transaction
	if e.close == nil {
		e.close = func(ctx context.Context) error {
			_, err1 := e.db.ExecContext(ctx, `DROP TABLE IF EXISTS `+e.quote(e.table))
			_, err2 := e.db.ExecContext(ctx, `DROP TABLE IF EXISTS `+e.quote(n.ident))
			return errors.Join(err1, err2, e.db.Close())
		}
	}
	if _, err := e.db.ExecContext(ctx, `CREATE TABLE `+e.quote(e.table)+` (id VARCHAR(255) PRIMARY KEY, body TEXT NOT NULL)`); err != nil {
		return nil, errors.Join(err, e.close(ctx))
	}
	return e, nil
}

// effectBackend opens the database of an effect variant with a table of
// its own that receives one row per message (its key and body): a bare
// client INSERTs with autocommit (or with a hand-written inbox row in one
// transaction), msgaudit's handler with autocommit behind the audit or a
// store, or in the inbox's transaction, with the inbox table on the same
// database.
func (p *plan) effectBackend(ctx context.Context, k kind, n names) (*backend, error) {
	fx, err := p.openEffect(ctx, k.effectDB(), n)
	if err != nil {
		return nil, err
	}
	be := &backend{effect: fx, close: fx.close, handler: plainHandler}
	switch {
	case k == bareInboxPostgres || k == bareInboxMySQL:
		// The hand-written inbox row: affects 0 rows for a recorded key.
		mark := `INSERT INTO ` + fx.quote(n.ident) + ` (id) VALUES ($1) ON CONFLICT (id) DO NOTHING`
		if k == bareInboxMySQL {
			mark = `INSERT INTO ` + fx.quote(n.ident) + ` (id) VALUES (?) ON DUPLICATE KEY UPDATE id = id`
		}
		if _, err := fx.db.ExecContext(ctx, `CREATE TABLE `+fx.quote(n.ident)+` (id VARCHAR(255) PRIMARY KEY)`); err != nil {
			return nil, errors.Join(err, fx.close(ctx))
		}
		be.apply = func(ctx context.Context, key string, body []byte) error {
			tx, err := fx.db.BeginTx(ctx, nil)
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
			if _, err := tx.ExecContext(ctx, fx.insert, key, string(body)); err != nil {
				return err
			}
			return tx.Commit()
		}
	case k.isBareEffect() || k == bareSendPostgres:
		// bare-send-postgres: measure adds the publish.
		be.apply = fx.exec
	case k == outboxSendPostgres:
		ib, err := inbox.New(ctx, fx.db, inbox.Options{Dialect: inbox.PostgreSQL, Table: n.ident, MaxBatch: p.InboxBatch, Linger: p.InboxLinger})
		if err != nil {
			return nil, errors.Join(err, fx.close(ctx))
		}
		ob, err := outbox.New(ctx, fx.db, outbox.Options{Dialect: inbox.PostgreSQL, Table: outboxTable(n)})
		if err != nil {
			return nil, errors.Join(err, fx.close(ctx))
		}
		// The relay's claims and marks and drained's samples beside the
		// handlers' transactions.
		fx.db.SetMaxOpenConns(2*p.Concurrency + 2)
		fx.db.SetMaxIdleConns(2*p.Concurrency + 2)
		be.inbox, be.outbox = ib, ob
		be.close = func(ctx context.Context) error {
			_, err := fx.db.ExecContext(ctx, `DROP TABLE IF EXISTS `+fx.quote(outboxTable(n)))
			return errors.Join(ob.Close(), err, fx.close(ctx))
		}
		be.drained = func(ctx context.Context) error { return waitRelayed(ctx, ob, nil) }
		be.handler = func(count func()) receiver.Handler {
			return inbox.Handler(func(ctx context.Context, tx *sql.Tx, m *receiver.Message) error {
				if _, err := tx.ExecContext(ctx, fx.insert, m.Key, string(m.Body)); err != nil {
					return err
				}
				if err := ob.Send(ctx, tx, outbox.Message{Destination: be.sendTo, Body: m.Body}); err != nil {
					return err
				}
				count()
				return nil
			})
		}
	case k.storeKind() != 0:
		base, err := p.openBackend(ctx, k.storeKind(), n)
		if err != nil {
			return nil, errors.Join(err, fx.close(ctx))
		}
		be.store = base.store
		be.close = func(ctx context.Context) error { return errors.Join(base.close(ctx), fx.close(ctx)) }
		be.handler = func(count func()) receiver.Handler {
			return func(ctx context.Context, m *receiver.Message) error {
				if err := fx.exec(ctx, m.Key, m.Body); err != nil {
					return err
				}
				count()
				return nil
			}
		}
	case k == pgxinboxEffectPostgres:
		cfg, err := pgxpool.ParseConfig(p.PostgresURL)
		if err != nil {
			return nil, errors.Join(fmt.Errorf("parsing %s: %w", redact.URL(p.PostgresURL), err), fx.close(ctx))
		}
		cfg.MaxConns = int32(2 * p.Concurrency)
		pool, err := pgxpool.NewWithConfig(ctx, cfg)
		if err != nil {
			return nil, errors.Join(err, fx.close(ctx))
		}
		ib, err := pgxinbox.New(ctx, pool, inbox.Options{Table: n.ident, MaxBatch: p.InboxBatch, Linger: p.InboxLinger})
		if err != nil {
			pool.Close()
			return nil, errors.Join(err, fx.close(ctx))
		}
		be.inbox = ib
		be.close = func(ctx context.Context) error {
			err := ib.Close()
			pool.Close()
			return errors.Join(err, fx.close(ctx))
		}
		be.handler = func(count func()) receiver.Handler {
			return pgxinbox.Handler(func(ctx context.Context, tx pgx.Tx, m *receiver.Message) error {
				if _, err := tx.Exec(ctx, fx.insert, m.Key, string(m.Body)); err != nil {
					return err
				}
				count()
				return nil
			})
		}
	default: // inbox-effect-*: database/sql's inbox
		dialect := map[string]inbox.Dialect{"postgres": inbox.PostgreSQL, "mysql": inbox.MySQL, "sqlite": inbox.SQLite}[k.effectDB()]
		ib, err := inbox.New(ctx, fx.db, inbox.Options{Dialect: dialect, Table: n.ident, MaxBatch: p.InboxBatch, Linger: p.InboxLinger})
		if err != nil {
			return nil, errors.Join(err, fx.close(ctx))
		}
		be.inbox = ib
		be.handler = func(count func()) receiver.Handler {
			return inbox.Handler(func(ctx context.Context, tx *sql.Tx, m *receiver.Message) error {
				if _, err := tx.ExecContext(ctx, fx.insert, m.Key, string(m.Body)); err != nil {
					return err
				}
				count()
				return nil
			})
		}
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
