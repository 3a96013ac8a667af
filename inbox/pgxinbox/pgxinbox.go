// Package pgxinbox is the transactional inbox of package inbox on a pgx v5
// pool (github.com/jackc/pgx/v5/pgxpool) instead of database/sql: the same
// table, flow, options and guarantees (read package inbox's documentation),
// with the handler given a pgx.Tx.
//
//	ib, err := pgxinbox.New(ctx, pool, inbox.Options{})
//	r, err := receiver.New(receiver.Config{Inbox: ib})
//	h := r.Wrap(pgxinbox.Handler(func(ctx context.Context, tx pgx.Tx, m *receiver.Message) error {
//		_, err := tx.Exec(ctx, `UPDATE accounts SET balance = balance + 1 WHERE id = $1`, string(m.Body))
//		return err
//	}))
//
// Options.Dialect may be left zero (it can only be inbox.PostgreSQL);
// Options.Isolation takes the database/sql levels (default, read
// committed, repeatable read, serializable), mapped to pgx's.
//
// Deliveries run in batches exactly as in package inbox: a lane is one
// open transaction holding one pool connection, so size the pool
// (pgxpool.Config.MaxConns) to at least Options.Lanes (by default the
// consumer's concurrency); the STOMP and RabbitMQ consumers check it at
// New. A batch member's savepoint and its INSERT travel in one round trip,
// and so do the batch's first INSERT and the savepoint the lane releases
// before its COMMIT to check that a handler did not end the transaction
// with a COMMIT or ROLLBACK statement.
package pgxinbox

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/acemq/msgaudit/idempotency"
	"github.com/acemq/msgaudit/inbox"
	"github.com/acemq/msgaudit/internal/inboxcore"
	"github.com/acemq/msgaudit/internal/inboxlane"
	"github.com/acemq/msgaudit/internal/inboxsql"
	"github.com/acemq/msgaudit/internal/pgtable"
	"github.com/acemq/msgaudit/internal/purgeloop"
	"github.com/acemq/msgaudit/internal/sqldb/pgxdb"
	"github.com/acemq/msgaudit/outbox"
	"github.com/acemq/msgaudit/receiver"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Inbox is the transactional inbox on a pgx pool; it implements
// receiver.Selector (Name "inbox"). It is safe for concurrent use.
type Inbox struct {
	core   *inboxcore.Core // keys, the read-only statements, the purge
	pool   *pgxpool.Pool
	o      inbox.Options
	sql    inboxsql.SQL
	count  inboxsql.Counter
	log    *slog.Logger
	txOpts pgx.TxOptions
	lanes  *inboxlane.Pool
}

var _ receiver.Selector = (*Inbox)(nil)

// New returns an Inbox on pool: it validates o, checks that the server is
// PostgreSQL and creates the table if it is missing (see inbox.New). The
// pool stays the caller's: the Inbox never closes it. With
// Options.PurgeInterval set, New starts the automatic purge; Close stops
// it.
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
	sized := o.Lanes != 0
	if o.Lanes, o.MaxBatch, o.Linger, err = inboxsql.BatchLimits(o.Lanes, o.MaxBatch, o.Linger); err != nil {
		return nil, fmt.Errorf("%w: %v", inbox.ErrConfig, err)
	}
	if err := inboxsql.PostgresBatch(o.MaxBatch); err != nil {
		return nil, fmt.Errorf("%w: %v", inbox.ErrConfig, err)
	}
	st, err := inboxsql.Build(o.Table, inboxsql.Postgres)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", inbox.ErrConfig, err)
	}
	if o.Table == "" {
		o.Table = inboxsql.DefaultTable
	}
	log := o.Logger
	if log == nil {
		log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	ib := &Inbox{pool: pool, o: o, sql: st, count: inboxsql.NewCounter(o.Metrics), log: log, txOpts: opts}
	ib.lanes = inboxlane.New(inboxlane.Config{
		Lanes: o.Lanes, MaxBatch: o.MaxBatch, Linger: o.Linger, Begin: ib.begin,
		WithTx:   func(c context.Context, v any) context.Context { return context.WithValue(c, txKey{}, v) },
		Ended:    func(err error) bool { return errors.Is(err, pgx.ErrTxClosed) },
		Broken:   inboxsql.Broken,
		Describe: inboxsql.Describe,
	})
	var probe string
	if err := pool.QueryRow(ctx, st.Probe).Scan(&probe); err != nil {
		return nil, fmt.Errorf("%w: the server does not answer as PostgreSQL: %v", inbox.ErrConfig, err)
	}
	if err := create(ctx, pool, st, o.Table); err != nil {
		return nil, err
	}
	ib.core = inboxcore.New(inboxcore.Config{DB: pgxdb.Pool(pool), SQL: st, Namespace: o.Namespace,
		MaxKeyLength: o.MaxKeyLength, PurgeBatch: o.PurgeBatch, Retention: o.Retention, Pace: purgeloop.Server,
		Count: ib.count, Lanes: ib.lanes, Sized: sized})
	ib.core.StartPurge(o.PurgeInterval, "inbox "+o.Table, log)
	return ib, nil
}

// Close stops the automatic purge and waits for a purge in progress to
// stop; see (*inbox.Inbox).Close. The pool stays open.
func (ib *Inbox) Close() error { return ib.core.Close() }

// PurgeStats returns the counters of the inbox's purges: the automatic
// ones and the calls of Purge and PurgeExpired.
func (ib *Inbox) PurgeStats() idempotency.PurgeStats { return ib.core.PurgeStats() }

// Backlog samples the inbox in one statement; see (*inbox.Inbox).Backlog
// on PostgreSQL.
func (ib *Inbox) Backlog(ctx context.Context) (idempotency.Backlog, error) {
	return ib.core.Backlog(ctx)
}

// create runs the schema statements in one transaction, under an advisory
// lock that serialises concurrent creators (tried a second time if it
// fails all the same), and then checks on that connection what the
// table's name resolved to: a temporary table (an unqualified name under
// a search_path that starts with pg_temp) or an unlogged one loses
// recorded keys and is refused (inbox.ErrConfig), its creation rolled
// back.
func create(ctx context.Context, pool *pgxpool.Pool, st inboxsql.SQL, table string) error {
	var err error
	for range 2 {
		var bad error
		err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			for _, q := range append([]string{inboxsql.CreateLock}, st.Create...) {
				if _, err := tx.Exec(ctx, q); err != nil {
					return err
				}
			}
			var schema, persistence string
			err := tx.QueryRow(ctx, st.Resolve, st.Table).Scan(&schema, &persistence)
			if err != nil && !errors.Is(err, pgx.ErrNoRows) {
				return err
			}
			bad = pgtable.Check(st.Table, err == nil, schema, persistence)
			return bad
		})
		if bad != nil {
			return fmt.Errorf("%w: inbox table %s: %v", inbox.ErrConfig, table, bad)
		}
		if err == nil {
			return nil
		}
	}
	return fmt.Errorf("inbox: creating table %s: %w", table, err)
}

// Name returns "inbox".
func (ib *Inbox) Name() string { return "inbox" }

// Namespace returns the namespace m's key is recorded under.
func (ib *Inbox) Namespace(m *receiver.Message) string { return ib.core.Namespace(m) }

// MaxOpenConns returns the pool's MaxConns: every lane holds one
// connection while its transaction is open.
func (ib *Inbox) MaxOpenConns() int { return int(ib.pool.Config().MaxConns) }

// Lanes returns the number of lanes.
func (ib *Inbox) Lanes() int { return ib.lanes.Lanes() }

// MaxBatch returns the effective Options.MaxBatch.
func (ib *Inbox) MaxBatch() int { return ib.o.MaxBatch }

// Linger returns the effective Options.Linger.
func (ib *Inbox) Linger() time.Duration { return ib.o.Linger }

// SizeLanes sets the number of lanes to handlers when Options.Lanes was 0
// and returns the number in effect; see (*inbox.Inbox).SizeLanes.
func (ib *Inbox) SizeLanes(handlers int) int { return ib.core.SizeLanes(handlers) }

// Batches returns how many COMMITs the lanes ran (successful or not) and
// how many deliveries they covered.
func (ib *Inbox) Batches() (commits, deliveries uint64) { return ib.lanes.Stats() }

type txKey struct{}

// Tx returns the delivery's open inbox transaction carried by ctx.
func Tx(ctx context.Context) (pgx.Tx, bool) {
	tx, ok := ctx.Value(txKey{}).(pgx.Tx)
	return tx, ok
}

// Select takes a lane, opens the delivery's savepoint in its transaction
// (or begins it) and inserts the key; see (*inbox.Inbox).Select. ctx
// bounds the wait for a lane, the BEGIN and the INSERT (including the wait
// for a competing transaction of the same key).
func (ib *Inbox) Select(ctx context.Context, m *receiver.Message) (receiver.Decision, error) {
	return ib.core.Select(ctx, m)
}

// begin begins a lane's transaction; ctx bounds the BEGIN.
func (ib *Inbox) begin(ctx context.Context) (inboxlane.Tx, error) {
	t0 := time.Now()
	tx, err := ib.pool.BeginTx(ctx, ib.txOpts)
	ib.count.Observe(time.Since(t0), err)
	if err != nil {
		return nil, err
	}
	return &pgxTx{ib: ib, tx: tx}, nil
}

// pgxTx is a lane's transaction on pgx.
type pgxTx struct {
	ib *Inbox
	tx pgx.Tx
}

func (t *pgxTx) Insert(ctx context.Context, sp bool, ns, key string) (bool, error) {
	t0 := time.Now()
	if !sp {
		// The batch's first INSERT follows the savepoint Check releases
		// before the COMMIT, in the same round trip.
		tag, err := t.batch(ctx, inboxsql.BatchSavepoint, ns, key)
		t.ib.count.Observe(time.Since(t0), err)
		return tag.RowsAffected() > 0, err
	}
	// The savepoint and the INSERT in one round trip. A later member's
	// statements must not be cancelled through ctx (pgx gives up a
	// cancelled statement by breaking the connection, which would lose the
	// batch's other members): the INSERT may wait on the unique index for
	// another transaction, so ctx ending cancels it on the server instead.
	pid := t.tx.Conn().PgConn().PID()
	var tag pgconn.CommandTag
	err := inboxsql.Guard(ctx, func(c context.Context) error {
		_, err := t.ib.pool.Exec(c, inboxsql.CancelBackend, pid)
		return err
	}, func(c context.Context) error {
		var err error
		tag, err = t.batch(c, inboxsql.Savepoint, ns, key)
		return err
	})
	t.ib.count.Observe(time.Since(t0), err)
	return tag.RowsAffected() > 0, err
}

// batch sends SAVEPOINT sp and the INSERT in one round trip.
func (t *pgxTx) batch(ctx context.Context, sp, ns, key string) (pgconn.CommandTag, error) {
	var b pgx.Batch
	b.Queue(`SAVEPOINT ` + sp)
	b.Queue(t.ib.sql.Insert, ns, key)
	br := t.tx.SendBatch(ctx, &b)
	var tag pgconn.CommandTag
	_, err := br.Exec()
	if err == nil {
		tag, err = br.Exec()
	}
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	return tag, err
}

// Check releases the savepoint the batch's first INSERT followed. It
// fails when a handler ended the transaction with a COMMIT or ROLLBACK
// statement: no transaction is open any more.
func (t *pgxTx) Check(ctx context.Context) error {
	t0 := time.Now()
	_, err := t.tx.Exec(ctx, `RELEASE SAVEPOINT `+inboxsql.BatchSavepoint)
	t.ib.count.Observe(time.Since(t0), err)
	return err
}

func (t *pgxTx) RollbackTo(ctx context.Context) error {
	t0 := time.Now()
	_, err := t.tx.Exec(ctx, `ROLLBACK TO SAVEPOINT `+inboxsql.Savepoint+`; RELEASE SAVEPOINT `+inboxsql.Savepoint)
	t.ib.count.Observe(time.Since(t0), err)
	return err
}

func (t *pgxTx) Commit(ctx context.Context) error {
	t0 := time.Now()
	err := t.tx.Commit(ctx)
	t.ib.count.Observe(time.Since(t0), err)
	return err
}

func (t *pgxTx) Rollback(ctx context.Context) error {
	t0 := time.Now()
	err := t.tx.Rollback(ctx)
	if !errors.Is(err, pgx.ErrTxClosed) {
		t.ib.count.Observe(time.Since(t0), err)
	}
	return err
}

func (t *pgxTx) Value() any { return t.tx }

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
	return ib.core.Contains(ctx, namespace, key)
}

// Purge deletes the rows recorded before olderThan in bounded,
// index-driven batches that skip locked rows; see (*inbox.Inbox).Purge.
func (ib *Inbox) Purge(ctx context.Context, olderThan time.Time) (n int64, err error) {
	return ib.core.Purge(ctx, olderThan)
}

// PurgeExpired deletes the rows older than Options.Retention.
func (ib *Inbox) PurgeExpired(ctx context.Context) (int64, error) { return ib.core.PurgeExpired(ctx) }

// OutboxTx returns tx as the transaction outbox.Send records a message in,
// for a handler on a pgx transaction (Handler's tx):
//
//	err := ob.Send(ctx, pgxinbox.OutboxTx(tx), outbox.Message{Destination: "payments", Body: b})
//
// The outbox's relay runs on database/sql: give outbox.New
// stdlib.OpenDBFromPool(pool).
func OutboxTx(tx pgx.Tx) outbox.Tx { return outboxTx{tx} }

type outboxTx struct{ tx pgx.Tx }

func (t outboxTx) ExecContext(ctx context.Context, q string, args ...any) (sql.Result, error) {
	tag, err := t.tx.Exec(ctx, q, args...)
	if err != nil {
		return nil, err
	}
	return driver.RowsAffected(tag.RowsAffected()), nil
}
