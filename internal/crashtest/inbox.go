//go:build unix

package crashtest

import (
	"context"
	"database/sql"
	"testing"

	"github.com/acemq/msgaudit/inbox"
	"github.com/acemq/msgaudit/receiver"
)

// inboxOptions are the inbox's options for cfg.
func inboxOptions(cfg Config, m *receiver.Metrics) inbox.Options {
	d := inbox.PostgreSQL
	if cfg.DB == SQLite {
		d = inbox.SQLite
	}
	return inbox.Options{Dialect: d, Table: cfg.StoreAt, Metrics: m}
}

// inboxTier is the transactional inbox on the ledger's database, wrapped
// to sleep after its commit, and the handler that writes the ledger in
// the inbox's transaction and sleeps before returning (before the
// commit).
func inboxTier(ctx context.Context, cfg Config, db *sql.DB, led *ledger, g *gauges, m *receiver.Metrics) (receiver.Selector, receiver.Handler, error) {
	ib, err := inbox.New(ctx, db, inboxOptions(cfg, m))
	if err != nil {
		return nil, nil, err
	}
	h := inbox.Handler(func(ctx context.Context, tx *sql.Tx, m *receiver.Message) error {
		g.add(gaugeCalls, 1)
		end := markEffect(ctx, g)
		defer end()
		if err := led.record(ctx, tx, m.IdempotencyKey()); err != nil {
			return err
		}
		sleep(cfg.EffectDelay)
		return nil
	})
	return slowInbox{slowSettle{ib, g, cfg.AckDelay}, ib}, h, nil
}

// slowInbox is a slowSettle over an inbox that still tells the consumers
// its pool size (they refuse a pool smaller than their concurrency).
type slowInbox struct {
	slowSettle
	ib *inbox.Inbox
}

// MaxOpenConns returns the inbox's pool limit.
func (s slowInbox) MaxOpenConns() int { return s.ib.MaxOpenConns() }

// prepareInbox creates the inbox table before the children start, so
// that two of them do not race to create it, and drops it at the end.
func prepareInbox(t testing.TB, cfg *Config, db *sql.DB) {
	t.Helper()
	if _, err := inbox.New(context.Background(), db, inboxOptions(*cfg, nil)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if _, err := db.ExecContext(context.Background(), `DROP TABLE IF EXISTS "`+cfg.StoreAt+`"`); err != nil {
			t.Errorf("cleanup: drop %s: %v", cfg.StoreAt, err)
		}
	})
}
