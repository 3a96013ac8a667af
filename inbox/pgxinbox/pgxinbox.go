// Package pgxinbox is the transactional inbox of package inbox on a pgx v5
// pool (github.com/jackc/pgx/v5/pgxpool) instead of database/sql: the same
// table, flow, options and guarantees (read package inbox's documentation),
// with the handler given a pgx.Tx.
//
//	ib, err := pgxinbox.New(ctx, pool, inbox.Options{})
//	h := receiver.Wrap(pgxinbox.Handler(func(ctx context.Context, tx pgx.Tx, m *receiver.Message) error {
//		_, err := tx.Exec(ctx, `UPDATE accounts SET balance = balance + 1 WHERE id = $1`, string(m.Body))
//		return err
//	}), receiver.WithSelectors(ib))
//
// Options.Dialect may be left zero (it can only be inbox.PostgreSQL);
// Options.Isolation takes the database/sql levels (default, read
// committed, repeatable read, serializable), mapped to pgx's.
//
// A delivery holds one pool connection from Select until its settlement:
// size the pool (pgxpool.Config.MaxConns) to at least the consumer's
// concurrency; the STOMP and RabbitMQ consumers check it at New.
package pgxinbox

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/acemq/msgaudit/inbox"
	"github.com/acemq/msgaudit/internal/inboxsql"
	"github.com/acemq/msgaudit/receiver"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Inbox is the transactional inbox on a pgx pool; it implements
// receiver.Selector (Name "inbox"). It is safe for concurrent use.
type Inbox struct {
	pool      *pgxpool.Pool
	o         inbox.Options
	sql       inboxsql.SQL
	namespace func(m *receiver.Message) string
	count     inboxsql.Counter
	log       *slog.Logger
	txOpts    pgx.TxOptions
}

var _ receiver.Selector = (*Inbox)(nil)

// New returns an Inbox on pool: it validates o, checks that the server is
// PostgreSQL and creates the table if it is missing (see inbox.New). The
// pool stays the caller's: the Inbox never closes it.
func New(ctx context.Context, pool *pgxpool.Pool, o inbox.Options) (*Inbox, error) {
	if pool == nil {
		return nil, fmt.Errorf("%w: nil *pgxpool.Pool", inbox.ErrConfig)
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if o.Dialect != 0 && o.Dialect != inbox.PostgreSQL {
		return nil, fmt.Errorf("%w: pgxinbox speaks PostgreSQL only, not %v", inbox.ErrConfig, o.Dialect)
	}
	o.Dialect = inbox.PostgreSQL
	var opts pgx.TxOptions
	switch o.Isolation {
	case sql.LevelDefault:
	case sql.LevelReadCommitted:
		opts.IsoLevel = pgx.ReadCommitted
	case sql.LevelRepeatableRead:
		opts.IsoLevel = pgx.RepeatableRead
	case sql.LevelSerializable:
		opts.IsoLevel = pgx.Serializable
	default:
		return nil, fmt.Errorf("%w: isolation %v is not supported on PostgreSQL (use default, read committed, repeatable read or serializable)", inbox.ErrConfig, o.Isolation)
	}
	var err error
	if o.Retention, o.MaxKeyLength, o.PurgeBatch, err = inboxsql.Limits(o.Retention, o.MaxKeyLength, o.PurgeBatch); err != nil {
		return nil, fmt.Errorf("%w: %v", inbox.ErrConfig, err)
	}
	st, err := inboxsql.Build(o.Table, true)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", inbox.ErrConfig, err)
	}
	if o.Table == "" {
		o.Table = inbox.DefaultTable
	}
	log := o.Logger
	if log == nil {
		log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	ib := &Inbox{pool: pool, o: o, sql: st, namespace: inboxsql.Namespacer(o.Namespace),
		count: inboxsql.NewCounter(o.Metrics), log: log, txOpts: opts}
	var probe string
	if err := pool.QueryRow(ctx, st.Probe).Scan(&probe); err != nil {
		return nil, fmt.Errorf("%w: the server does not answer as PostgreSQL: %v", inbox.ErrConfig, err)
	}
	for _, q := range st.Create {
		if _, err := pool.Exec(ctx, q); err != nil {
			// A racing CREATE ... IF NOT EXISTS can fail once on a catalog index.
			if _, err2 := pool.Exec(ctx, q); err2 != nil {
				return nil, fmt.Errorf("inbox: creating table %s: %w", o.Table, err)
			}
		}
	}
	return ib, nil
}

// Name returns "inbox".
func (ib *Inbox) Name() string { return "inbox" }

// Table returns the table name.
func (ib *Inbox) Table() string { return ib.o.Table }

// Retention returns the effective Options.Retention.
func (ib *Inbox) Retention() time.Duration { return ib.o.Retention }

// Namespace returns the namespace m's key is recorded under.
func (ib *Inbox) Namespace(m *receiver.Message) string { return ib.namespace(m) }

// MaxOpenConns returns the pool's MaxConns: every running delivery holds
// one connection until its settlement.
func (ib *Inbox) MaxOpenConns() int { return int(ib.pool.Config().MaxConns) }

type txKey struct{}

// Tx returns the delivery's open inbox transaction carried by ctx.
func Tx(ctx context.Context) (pgx.Tx, bool) {
	tx, ok := ctx.Value(txKey{}).(pgx.Tx)
	return tx, ok
}

// Select begins the delivery's transaction and inserts its key; see
// (*inbox.Inbox).Select. ctx bounds the BEGIN and the INSERT (including
// the wait for a competing transaction of the same key).
func (ib *Inbox) Select(ctx context.Context, m *receiver.Message) (receiver.Decision, error) {
	key := m.IdempotencyKey()
	if key == "" {
		return receiver.Decision{}, fmt.Errorf("%w: inbox: empty key", receiver.ErrBadKey)
	}
	ns := inboxsql.StorageKey(ib.namespace(m), ib.o.MaxKeyLength)
	key = inboxsql.StorageKey(key, ib.o.MaxKeyLength)
	fail := func(op string, err error) (receiver.Decision, error) {
		if cerr := ctx.Err(); cerr != nil && !errors.Is(err, cerr) {
			return receiver.Decision{}, fmt.Errorf("inbox: %s: %w (%v)", op, cerr, err)
		}
		return receiver.Decision{}, inboxsql.Describe(op, err)
	}
	t0 := time.Now()
	tx, err := ib.pool.BeginTx(ctx, ib.txOpts)
	ib.count.Observe(time.Since(t0), err)
	if err != nil {
		return fail("begin", err)
	}
	// Rollbacks run even when ctx ended; they are short.
	rctx := context.WithoutCancel(ctx)
	t0 = time.Now()
	tag, err := tx.Exec(ctx, ib.sql.Insert, ns, key)
	ib.count.Observe(time.Since(t0), err)
	if err != nil {
		_ = tx.Rollback(rctx)
		return fail("recording the key", err)
	}
	if tag.RowsAffected() == 0 {
		t0 = time.Now()
		err := tx.Rollback(rctx)
		ib.count.Observe(time.Since(t0), err)
		return receiver.Decision{Verdict: receiver.Reject, Reason: "inbox", Detail: "recorded"}, nil
	}
	return receiver.Decision{
		Verdict: receiver.Accept, Reason: "new", Detail: "new",
		Context: func(c context.Context) context.Context { return context.WithValue(c, txKey{}, tx) },
		Settle: func(sctx context.Context, s receiver.Settlement) error {
			t0 := time.Now()
			if s == receiver.Completed {
				err := tx.Commit(sctx)
				ib.count.Observe(time.Since(t0), err)
				switch {
				case err == nil:
					return nil
				case errors.Is(err, pgx.ErrTxClosed):
					return inbox.ErrTxEnded
				}
				return fmt.Errorf("%w: %w", inbox.ErrCommit, err)
			}
			err := tx.Rollback(sctx)
			if errors.Is(err, pgx.ErrTxClosed) { // after a failed commit, or ended by the handler
				return nil
			}
			ib.count.Observe(time.Since(t0), err)
			if err != nil {
				return fmt.Errorf("inbox: rollback: %w", err)
			}
			return nil
		},
	}, nil
}

// Handler returns a receiver.Handler that runs h with the delivery's open
// inbox transaction; see inbox.Handler. h must neither commit nor roll back
// tx. A delivery without the transaction fails with inbox.ErrNoTx and h
// does not run. Handler panics on a nil h.
func Handler(h func(ctx context.Context, tx pgx.Tx, m *receiver.Message) error) receiver.Handler {
	if h == nil {
		panic("pgxinbox: Handler(nil)")
	}
	return func(ctx context.Context, m *receiver.Message) error {
		tx, ok := Tx(ctx)
		if !ok {
			if m.Duplicate {
				return fmt.Errorf("%w (a duplicate handed over under DuplicateDeliver has none: use another duplicate policy with the inbox)", inbox.ErrNoTx)
			}
			return inbox.ErrNoTx
		}
		return h(ctx, tx, m)
	}
}

// Contains reports whether key is recorded under namespace.
func (ib *Inbox) Contains(ctx context.Context, namespace, key string) (bool, error) {
	var ok bool
	err := ib.pool.QueryRow(ctx, ib.sql.Contains,
		inboxsql.StorageKey(namespace, ib.o.MaxKeyLength), inboxsql.StorageKey(key, ib.o.MaxKeyLength)).Scan(&ok)
	if err != nil {
		return false, fmt.Errorf("inbox: contains: %w", err)
	}
	return ok, nil
}

// Purge deletes the rows recorded before olderThan in bounded,
// index-driven batches that skip locked rows; see (*inbox.Inbox).Purge.
func (ib *Inbox) Purge(ctx context.Context, olderThan time.Time) (int64, error) {
	var total int64
	for {
		if err := ctx.Err(); err != nil {
			return total, err
		}
		t0 := time.Now()
		tag, err := ib.pool.Exec(ctx, ib.sql.Purge, olderThan, ib.o.PurgeBatch)
		ib.count.Observe(time.Since(t0), err)
		if err != nil {
			return total, fmt.Errorf("inbox: purge: %w", err)
		}
		n := tag.RowsAffected()
		total += n
		if n < int64(ib.o.PurgeBatch) {
			return total, nil
		}
	}
}

// PurgeExpired deletes the rows older than Options.Retention.
func (ib *Inbox) PurgeExpired(ctx context.Context) (int64, error) {
	return ib.Purge(ctx, time.Now().Add(-ib.o.Retention))
}
