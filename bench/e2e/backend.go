package e2e

import (
	"context"
	"database/sql"
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
	"github.com/acemq/msgaudit/receiver"
	_ "github.com/jackc/pgx/v5/stdlib" // the "pgx" database/sql driver, for the PostgreSQL inbox
	"github.com/redis/go-redis/v9"
	_ "modernc.org/sqlite" // the "sqlite" database/sql driver, for the SQLite inbox
)

// backend is a variant's durable tier: an idempotency store or an inbox
// (neither for the audit-only variant), with what removes it again.
type backend struct {
	store idempotency.Store
	inbox receiver.Selector
	// counting wraps a counting function into the variant's handler.
	handler func(count func()) receiver.Handler
	close   func(ctx context.Context) error
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
		return "", fmt.Errorf("parsing %s: %w", idempotency.RedactURL(raw), err)
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
		m := idempotency.NewMemory(idempotency.Options{})
		be.store = m
		be.close = func(context.Context) error { return m.Close() }
	case redisStore:
		prefix := "msgaudit:" + n.ident + ":"
		raw, err := withQuery(p.RedisURL, "msgaudit_prefix", prefix)
		if err != nil {
			return nil, err
		}
		s, err := redisstore.Open(ctx, raw, idempotency.Options{}, nil)
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
		s, err := pgstore.Open(ctx, raw, idempotency.Options{})
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
		s, err := sqlitestore.Open(ctx, path, idempotency.Options{}, sqlitestore.WithSynchronous(sync))
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
		ib, err := inbox.New(ctx, db, inbox.Options{Dialect: inbox.SQLite})
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
		ib, err := inbox.New(ctx, db, inbox.Options{Dialect: inbox.PostgreSQL, Table: n.ident})
		if err != nil {
			db.Close()
			return nil, errors.Join(err, p.dropTable(ctx, n.ident))
		}
		be.inbox, be.handler = ib, inboxHandler
		be.close = func(ctx context.Context) error { return errors.Join(db.Close(), p.dropTable(ctx, n.ident)) }
	default:
		return nil, fmt.Errorf("e2e: no backend for kind %d", k)
	}
	return be, nil
}

// deleteRedisPrefix deletes every key under prefix.
func (p *plan) deleteRedisPrefix(ctx context.Context, prefix string) error {
	opt, err := redis.ParseURL(p.RedisURL)
	if err != nil {
		return fmt.Errorf("parsing %s: %w", idempotency.RedactURL(p.RedisURL), err)
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

// receiver returns the duplicate pipeline the run builds itself for a
// variant with a store when groupsStore: the Receiver the consumers build
// from their Config (audit, the store, Concurrency handlers, every other
// field at its default), with Options.StoreBatch and StoreLinger added.
func (p *plan) receiver(be *backend, audit receiver.Auditor) (*receiver.Receiver, error) {
	return receiver.New(receiver.Config{
		Audit:       audit,
		Store:       be.store,
		StoreBatch:  p.StoreBatch,
		StoreLinger: p.StoreLinger,
		Handlers:    p.Concurrency,
	})
}
