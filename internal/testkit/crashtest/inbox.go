//go:build unix

package crashtest

import (
	"context"
	"database/sql"
	"testing"

	"github.com/acemq/msgaudit/inbox"
	"github.com/acemq/msgaudit/inbox/pgxinbox"
	"github.com/acemq/msgaudit/receiver"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// inboxOptions are the inbox's options for cfg.
func inboxOptions(cfg Config, m *receiver.Metrics) inbox.Options {
	d := inbox.PostgreSQL
	switch cfg.DB {
	case SQLite:
		d = inbox.SQLite
	case MySQL:
		d = inbox.MySQL
	}
	return inbox.Options{Dialect: d, Table: cfg.StoreAt, Metrics: m}
}

// inboxTier is the transactional inbox on the ledger's database (through
// database/sql, or natively on a pgx pool for StorePgxInbox), wrapped to
// sleep after its commit, and the handler that writes the ledger in the
// inbox's transaction and sleeps before returning (before the commit). The
// returned function releases what it opened.
func inboxTier(ctx context.Context, cfg Config, db *sql.DB, led *ledger, g *gauges, m *receiver.Metrics) (receiver.Inbox, receiver.Handler, func(), error) {
	apply := func(ctx context.Context, e execer, m *receiver.Message) error {
		end := markEffect(ctx, g)
		defer end()
		if err := led.record(ctx, e, m.IdempotencyKey()); err != nil {
			return err
		}
		sleep(cfg.EffectDelay)
		return nil
	}
	if cfg.Store == StorePgxInbox {
		pc, err := pgxpool.ParseConfig(cfg.DSN)
		if err != nil {
			return nil, nil, nil, err
		}
		pc.MaxConns = int32(cfg.Concurrency + 1)
		pool, err := pgxpool.NewWithConfig(ctx, pc)
		if err != nil {
			return nil, nil, nil, err
		}
		ib, err := pgxinbox.New(ctx, pool, inboxOptions(cfg, m))
		if err != nil {
			pool.Close()
			return nil, nil, nil, err
		}
		h := pgxinbox.Handler(func(ctx context.Context, tx pgx.Tx, m *receiver.Message) error {
			g.add(gaugeCalls, 1)
			return apply(ctx, pgxExec{tx}, m)
		})
		return slowInbox{slowSettle{ib, g, cfg.AckDelay}, ib}, h, pool.Close, nil
	}
	ib, err := inbox.New(ctx, db, inboxOptions(cfg, m))
	if err != nil {
		return nil, nil, nil, err
	}
	h := inbox.Handler(func(ctx context.Context, tx *sql.Tx, m *receiver.Message) error {
		g.add(gaugeCalls, 1)
		return apply(ctx, tx, m)
	})
	return slowInbox{slowSettle{ib, g, cfg.AckDelay}, ib}, h, func() {}, nil
}

// pgxExec lets the ledger write through a pgx transaction.
type pgxExec struct{ tx pgx.Tx }

// ExecContext runs q in the transaction.
func (e pgxExec) ExecContext(ctx context.Context, q string, args ...any) (sql.Result, error) {
	_, err := e.tx.Exec(ctx, q, args...)
	return nil, err
}

// slowInbox is a slowSettle over an inbox that is still a receiver.Inbox:
// the receiver sizes its lanes and checks its pool size.
type slowInbox struct {
	slowSettle
	inbox receiver.Inbox
}

// MaxOpenConns returns the inbox's pool limit.
func (s slowInbox) MaxOpenConns() int { return s.inbox.MaxOpenConns() }

// SizeLanes sizes the inbox's lanes.
func (s slowInbox) SizeLanes(handlers int) int { return s.inbox.SizeLanes(handlers) }

// prepareInbox creates the inbox table before the children start, so
// that two of them do not race to create it, and drops it at the end
// (inbox and pgxinbox share the PostgreSQL schema).
func prepareInbox(t testing.TB, cfg *Config, db *sql.DB) {
	t.Helper()
	if _, err := inbox.New(context.Background(), db, inboxOptions(*cfg, nil)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		q := `"` + cfg.StoreAt + `"`
		if cfg.DB == MySQL {
			q = "`" + cfg.StoreAt + "`"
		}
		if _, err := db.ExecContext(context.Background(), `DROP TABLE IF EXISTS `+q); err != nil {
			t.Errorf("cleanup: drop %s: %v", cfg.StoreAt, err)
		}
	})
}
