package inbox

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"time"

	"github.com/acemq/msgaudit/internal/inboxlane"
	"github.com/acemq/msgaudit/internal/inboxsql"
	"github.com/acemq/msgaudit/receiver"
)

// Dialect is the SQL dialect of the database behind an Inbox.
type Dialect uint8

const (
	// PostgreSQL is PostgreSQL (for example through pgx's database/sql
	// driver, github.com/jackc/pgx/v5/stdlib).
	PostgreSQL Dialect = iota + 1
	// SQLite is SQLite (for example through modernc.org/sqlite).
	SQLite
)

// String returns "postgresql" or "sqlite".
func (d Dialect) String() string {
	switch d {
	case PostgreSQL:
		return "postgresql"
	case SQLite:
		return "sqlite"
	}
	return "dialect(" + strconv.Itoa(int(d)) + ")"
}

// Defaults of Options.
const (
	// DefaultTable is the table used when Options.Table is "".
	DefaultTable = inboxsql.DefaultTable
	// DefaultRetention is how long a recorded key is kept at least when
	// Options.Retention is 0: seven days, the idempotency stores' default.
	DefaultRetention = inboxsql.DefaultRetention
	// DefaultMaxKeyLength is the longest key (and namespace) stored
	// verbatim when Options.MaxKeyLength is 0.
	DefaultMaxKeyLength = inboxsql.DefaultMaxKeyLength
	// DefaultPurgeBatch is how many rows one Purge statement deletes at
	// most when Options.PurgeBatch is 0.
	DefaultPurgeBatch = inboxsql.DefaultPurgeBatch
	// DefaultMaxBatch is the most deliveries one COMMIT covers when
	// Options.MaxBatch is 0.
	DefaultMaxBatch = inboxsql.DefaultMaxBatch
	// DefaultLinger is how long a batch takes new members at most when
	// Options.Linger is 0.
	DefaultLinger = inboxsql.DefaultLinger
	// DefaultLanes is the number of lanes on PostgreSQL when Options.Lanes
	// is 0 and no consumer sized them (see Inbox.SizeLanes). On SQLite the
	// default is one lane.
	DefaultLanes = inboxsql.DefaultLanes
)

// Options configure an Inbox. Dialect is required; every other zero value
// means its default.
type Options struct {
	// Dialect is the database's SQL dialect; the zero value is an error.
	Dialect Dialect
	// Table is the inbox table, [schema.]name of letters, digits and '_'
	// (the name at most 47 bytes); it is quoted, so it is case-sensitive.
	// "" means DefaultTable.
	Table string
	// Namespace scopes the keys; "" means the message's destination. Topic
	// deliveries append "#" and the consumer, exactly like
	// receiver.StoreOptions.Namespace: each subscriber's copy is its own
	// unit of work.
	Namespace string
	// Retention is how long a recorded key is kept at least: PurgeExpired
	// deletes rows older than it. 0 means DefaultRetention. A redelivery
	// arriving after its key was purged is treated as new.
	Retention time.Duration
	// Isolation is the isolation level of the delivery's transaction.
	// PostgreSQL: sql.LevelDefault (the server's default, normally READ
	// COMMITTED), LevelReadCommitted, LevelRepeatableRead or
	// LevelSerializable. SQLite: LevelDefault or LevelSerializable (SQLite
	// transactions are serializable). Any other level is an error at New.
	Isolation sql.IsolationLevel
	// MaxKeyLength is the longest key and namespace stored verbatim, in
	// bytes; longer ones are stored as "sha256:" and their hex SHA-256,
	// never truncated. 0 means DefaultMaxKeyLength.
	MaxKeyLength int
	// PurgeBatch bounds the rows one Purge statement deletes; 0 means
	// DefaultPurgeBatch.
	PurgeBatch int
	// Lanes is the number of lanes: transactions open at once, each
	// running its deliveries' handlers one after the other (see the
	// package documentation). 0 means one on SQLite (one writer at a
	// time) and, on PostgreSQL, the concurrency of the consumer the inbox
	// is given to (Inbox.SizeLanes), or DefaultLanes without one. The
	// pool must allow at least Lanes connections, on PostgreSQL better one
	// more: a batch member whose INSERT waits for another transaction past
	// its context is cancelled through a free connection (without one
	// within 5 s, its lane's connection is broken and its whole batch
	// requeued).
	Lanes int
	// MaxBatch is the most deliveries one COMMIT covers; 1 commits every
	// delivery alone (the savepoint-free flow of one transaction per
	// delivery). 0 means DefaultMaxBatch.
	MaxBatch int
	// Linger is how long after its first delivery a batch takes new
	// members while deliveries keep waiting for the lane; it then commits
	// at the next member boundary. A batch commits at once when no
	// delivery waits, so a lone delivery never lingers. 0 means
	// DefaultLinger.
	Linger time.Duration
	// Metrics receives the database calls' latency and errors in its
	// store counters (StoreCalls, StoreNanos, StoreBuckets, StoreErrors);
	// nil counts nothing. Duplicates the inbox rejects are counted by the
	// receiver (reason "inbox", in DuplicatesOther).
	Metrics *receiver.Metrics
	// Logger receives warnings (for example a configuration New could not
	// verify); nil is silent.
	Logger *slog.Logger
}

// Errors of the inbox. Match them with errors.Is.
var (
	// ErrConfig is returned by New for invalid Options or a database that
	// does not fit them.
	ErrConfig = errors.New("inbox: invalid configuration")
	// ErrNoTx is returned by a Handler called without the inbox's open
	// transaction in its context: the handler is never run without it.
	ErrNoTx = errors.New("inbox: no inbox transaction in the handler's context")
	// ErrTxEnded is the settlement error when the handler committed or
	// rolled back the inbox's transaction itself. The delivery is requeued,
	// never acknowledged: the inbox commits (when the handler returns nil)
	// or rolls back (when it returns an error), the handler must do
	// neither.
	// Batched deliveries share one transaction, so the others of its
	// batch fail with ErrBatchAborted.
	ErrTxEnded = inboxlane.ErrTxEnded
	// ErrCommit wraps a failed COMMIT. Its outcome may be unknown (the
	// connection was lost during it); the delivery is requeued, and its
	// redelivery finds the key recorded or not and is right either way.
	// Every delivery of the batch the COMMIT covered gets it.
	ErrCommit = inboxlane.ErrCommit
	// ErrBatchAborted is the settlement error of a delivery whose batch's
	// transaction another delivery's handler ended (ErrTxEnded) or left
	// unusable, or whose lane lost its connection: its work is not
	// committed, and it is requeued, never acknowledged.
	ErrBatchAborted = inboxlane.ErrAborted
)

// Inbox is the transactional inbox: a receiver.Selector that records each
// delivery's key in the same database transaction as the handler's effect.
// See the package documentation. An Inbox is safe for concurrent use.
type Inbox struct {
	db        *sql.DB
	o         Options
	sql       inboxsql.SQL
	namespace func(m *receiver.Message) string
	count     inboxsql.Counter
	log       *slog.Logger
	txOpts    *sql.TxOptions
	lanes     *inboxlane.Pool
	sized     bool // Options.Lanes was set, or the dialect fixes it
}

var _ receiver.Selector = (*Inbox)(nil)

// New returns an Inbox on db. It validates o, checks that db speaks
// o.Dialect (and, for SQLite, that the connections have a busy timeout and
// begin their transactions IMMEDIATE, as far as it can tell; see the
// package documentation), and creates the table (unique on namespace and
// key, indexed on the recording time) if it is missing. db stays the
// caller's: the Inbox never closes it.
func New(ctx context.Context, db *sql.DB, o Options) (*Inbox, error) {
	if db == nil {
		return nil, fmt.Errorf("%w: nil *sql.DB", ErrConfig)
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	var err error
	switch o.Dialect {
	case PostgreSQL:
		switch o.Isolation {
		case sql.LevelDefault, sql.LevelReadCommitted, sql.LevelRepeatableRead, sql.LevelSerializable:
		default:
			return nil, fmt.Errorf("%w: isolation %v is not supported on PostgreSQL (use default, read committed, repeatable read or serializable)", ErrConfig, o.Isolation)
		}
	case SQLite:
		switch o.Isolation {
		case sql.LevelDefault, sql.LevelSerializable:
		default:
			return nil, fmt.Errorf("%w: isolation %v is not supported on SQLite, whose transactions are serializable (use default or serializable)", ErrConfig, o.Isolation)
		}
	case 0:
		return nil, fmt.Errorf("%w: Options.Dialect is required (inbox.PostgreSQL or inbox.SQLite)", ErrConfig)
	default:
		return nil, fmt.Errorf("%w: unknown dialect %v", ErrConfig, o.Dialect)
	}
	if o.Retention, o.MaxKeyLength, o.PurgeBatch, err = inboxsql.Limits(o.Retention, o.MaxKeyLength, o.PurgeBatch); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrConfig, err)
	}
	sized := o.Lanes != 0 || o.Dialect == SQLite
	if o.Lanes == 0 && o.Dialect == SQLite {
		o.Lanes = 1
	}
	if o.Lanes, o.MaxBatch, o.Linger, err = inboxsql.BatchLimits(o.Lanes, o.MaxBatch, o.Linger); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrConfig, err)
	}
	st, err := inboxsql.Build(o.Table, o.Dialect == PostgreSQL)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrConfig, err)
	}
	if o.Table == "" {
		o.Table = DefaultTable
	}
	log := o.Logger
	if log == nil {
		log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	ib := &Inbox{db: db, o: o, sql: st, namespace: inboxsql.Namespacer(o.Namespace),
		count: inboxsql.NewCounter(o.Metrics), log: log, sized: sized}
	ib.lanes = inboxlane.New(inboxlane.Config{
		Lanes: o.Lanes, MaxBatch: o.MaxBatch, Linger: o.Linger, Begin: ib.begin,
		WithTx:   func(c context.Context, v any) context.Context { return context.WithValue(c, txKey{}, v) },
		Ended:    func(err error) bool { return errors.Is(err, sql.ErrTxDone) },
		Broken:   inboxsql.Broken,
		Describe: inboxsql.Describe,
	})
	if o.Isolation != sql.LevelDefault {
		ib.txOpts = &sql.TxOptions{Isolation: o.Isolation}
	}
	var probe string
	if err := db.QueryRowContext(ctx, st.Probe).Scan(&probe); err != nil {
		return nil, fmt.Errorf("%w: the database does not answer as %v: %v", ErrConfig, o.Dialect, err)
	}
	if o.Dialect == SQLite {
		if err := ib.checkSQLite(ctx); err != nil {
			return nil, err
		}
	}
	if err := ib.create(ctx); err != nil {
		return nil, err
	}
	return ib, nil
}

// create runs the schema statements; a PostgreSQL CREATE ... IF NOT EXISTS
// racing another process's can fail once on a catalog unique index, so a
// failed statement is tried a second time.
func (ib *Inbox) create(ctx context.Context) error {
	for _, q := range ib.sql.Create {
		if _, err := ib.db.ExecContext(ctx, q); err != nil {
			if _, err2 := ib.db.ExecContext(ctx, q); err2 != nil {
				return fmt.Errorf("inbox: creating table %s: %w", ib.o.Table, err)
			}
		}
	}
	return nil
}

// checkSQLite checks the busy timeout and, when the pool has room for a
// second connection, that transactions begin IMMEDIATE: while one
// transaction is open, a second connection without a busy timeout must be
// refused the write lock.
func (ib *Inbox) checkSQLite(ctx context.Context) error {
	var busy int64
	if err := ib.db.QueryRowContext(ctx, `PRAGMA busy_timeout`).Scan(&busy); err != nil {
		return fmt.Errorf("inbox: sqlite: reading busy_timeout: %w", err)
	}
	if busy <= 0 {
		return fmt.Errorf("%w: sqlite connections have no busy timeout, so a delivery racing another writer fails at once; add _pragma=busy_timeout(5000) to the DSN", ErrConfig)
	}
	if ib.db.Stats().MaxOpenConnections == 1 {
		ib.log.Warn("inbox: sqlite pool of one connection: cannot check that the DSN has _txlock=immediate; other processes sharing the file need it")
		return nil
	}
	tx, err := ib.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("inbox: sqlite: begin: %w", err)
	}
	defer func() { _ = tx.Rollback() }()
	c, err := ib.db.Conn(ctx)
	if err != nil {
		return fmt.Errorf("inbox: sqlite: second connection: %w", err)
	}
	defer c.Close()
	if _, err := c.ExecContext(ctx, `PRAGMA busy_timeout = 0`); err != nil {
		return fmt.Errorf("inbox: sqlite: %w", err)
	}
	defer func() {
		_, _ = c.ExecContext(context.WithoutCancel(ctx), `PRAGMA busy_timeout = `+strconv.FormatInt(busy, 10))
	}()
	if _, err := c.ExecContext(ctx, `BEGIN IMMEDIATE`); err == nil {
		_, _ = c.ExecContext(context.WithoutCancel(ctx), `ROLLBACK`)
		return fmt.Errorf("%w: sqlite transactions begin DEFERRED; add _txlock=immediate to the DSN so a delivery takes the write lock at BEGIN", ErrConfig)
	}
	return nil
}

// Name returns "inbox".
func (ib *Inbox) Name() string { return "inbox" }

// Table returns the table name (Options.Table, or DefaultTable).
func (ib *Inbox) Table() string { return ib.o.Table }

// Retention returns the effective Options.Retention.
func (ib *Inbox) Retention() time.Duration { return ib.o.Retention }

// Namespace returns the namespace m's key is recorded under.
func (ib *Inbox) Namespace(m *receiver.Message) string { return ib.namespace(m) }

// MaxOpenConns returns the pool's connection limit (0 = unlimited). Every
// lane holds one connection while its transaction is open, so the pool
// must allow at least Lanes connections: consumers check it at New.
func (ib *Inbox) MaxOpenConns() int { return ib.db.Stats().MaxOpenConnections }

// Lanes returns the number of lanes.
func (ib *Inbox) Lanes() int { return ib.lanes.Lanes() }

// MaxBatch returns the effective Options.MaxBatch.
func (ib *Inbox) MaxBatch() int { return ib.o.MaxBatch }

// Linger returns the effective Options.Linger.
func (ib *Inbox) Linger() time.Duration { return ib.o.Linger }

// SizeLanes is called by the STOMP and RabbitMQ consumers at New with the
// number of handlers they run at once: when Options.Lanes was 0 on
// PostgreSQL it sets the number of lanes to handlers. It returns the
// number of lanes in effect, which the consumers check against their
// handlers and the pool's connections. Call it before the first delivery.
func (ib *Inbox) SizeLanes(handlers int) int {
	if !ib.sized && handlers > 0 {
		ib.lanes.SetLanes(handlers)
	}
	return ib.lanes.Lanes()
}

// Batches returns how many COMMITs the inbox's lanes ran (successful or
// not) and how many deliveries they covered.
func (ib *Inbox) Batches() (commits, deliveries uint64) { return ib.lanes.Stats() }

// txKey is the context key of a delivery's transaction.
type txKey struct{}

// Tx returns the delivery's open inbox transaction carried by ctx (the
// handler's context), if any.
func Tx(ctx context.Context) (*sql.Tx, bool) {
	tx, ok := ctx.Value(txKey{}).(*sql.Tx)
	return tx, ok
}

// Select takes a lane (see the package documentation), opens the
// delivery's savepoint in the lane's transaction (or begins it) and
// inserts the key:
//
//   - the key is new: Accept. The handler runs in the lane's transaction
//     (see Handler); Settle(Completed) returns once the COMMIT covering
//     the delivery succeeded, Settle(Failed or Abandoned) rolls back to the
//     delivery's savepoint.
//   - the key is recorded already (committed by an earlier delivery, here
//     or in another process): the delivery's savepoint is rolled back and
//     the delivery is rejected with reason "inbox", a confirmed duplicate.
//   - an error (the database is unreachable, a serialization failure or
//     deadlock, ctx ended): the delivery's savepoint is rolled back and the
//     error returned, so the receiver requeues.
//
// A concurrent delivery of the same key in another transaction makes the
// INSERT wait, in the database, for that transaction to end (bounded by
// ctx): it then finds the key (a duplicate) or not (new work). A delivery
// of a key whose first delivery is in the same open batch is deferred
// (requeued, reason "in-flight"). When a selector after the inbox rejects
// the delivery as finished work, the receiver settles the inbox Completed
// and the key is committed without the handler having run. ctx bounds the
// wait for a lane, the BEGIN and the INSERT.
func (ib *Inbox) Select(ctx context.Context, m *receiver.Message) (receiver.Decision, error) {
	key := m.IdempotencyKey()
	if key == "" {
		return receiver.Decision{}, fmt.Errorf("%w: inbox: empty key", receiver.ErrBadKey)
	}
	ns := inboxsql.StorageKey(ib.namespace(m), ib.o.MaxKeyLength)
	key = inboxsql.StorageKey(key, ib.o.MaxKeyLength)
	return ib.lanes.Select(ctx, ns, key)
}

// begin begins a lane's transaction. The transaction lives until its
// COMMIT or ROLLBACK, not until ctx ends: database/sql rolls a
// transaction back when its context ends, which would make an ended
// delivery context indistinguishable from a handler that ended the
// transaction itself. ctx bounds only the BEGIN (the wait for a pool
// connection and, on SQLite, for the write lock).
func (ib *Inbox) begin(ctx context.Context) (inboxlane.Tx, error) {
	txctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	stop := context.AfterFunc(ctx, cancel)
	t0 := time.Now()
	tx, err := ib.db.BeginTx(txctx, ib.txOpts)
	ib.count.Observe(time.Since(t0), err)
	if !stop() { // ctx ended: the transaction is being rolled back
		if err == nil {
			_ = tx.Rollback()
			err = ctx.Err()
		}
		cancel()
		return nil, err
	}
	if err != nil {
		cancel()
		return nil, err
	}
	return &sqlTx{ib: ib, tx: tx, cancel: cancel}, nil
}

// sqlTx is a lane's transaction on database/sql.
type sqlTx struct {
	ib     *Inbox
	tx     *sql.Tx
	cancel context.CancelFunc
	pid    int64 // PostgreSQL's server process, once known
}

// savepoint names every member's savepoint; members nest, so ROLLBACK TO
// reaches the innermost one, the delivery's own.
const savepoint = inboxsql.Savepoint

func (t *sqlTx) Insert(ctx context.Context, sp bool, ns, key string) (bool, error) {
	if sp {
		// A later member's statements must not be cancelled through ctx:
		// a driver gives up a cancelled statement by breaking its
		// connection (pgx) or rolling back the whole transaction (SQLite),
		// which would lose the batch's other members. On SQLite the INSERT
		// never waits (the transaction holds the write lock); on
		// PostgreSQL it may wait on the unique index for another
		// transaction, so ctx ending cancels it on the server instead.
		ctx0 := ctx
		ctx = context.WithoutCancel(ctx)
		t0 := time.Now()
		_, err := t.tx.ExecContext(ctx, `SAVEPOINT `+savepoint)
		t.ib.count.Observe(time.Since(t0), err)
		if err != nil {
			return false, err
		}
		if t.pid == 0 && t.ib.sql.PID != "" { // once a batch
			t0 := time.Now()
			err := t.tx.QueryRowContext(ctx, t.ib.sql.PID).Scan(&t.pid)
			t.ib.count.Observe(time.Since(t0), err)
			if err != nil {
				return false, err
			}
		}
		if t.pid != 0 {
			var inserted bool
			err := inboxsql.Guard(ctx0, func(c context.Context) error {
				_, err := t.ib.db.ExecContext(c, inboxsql.CancelBackend, t.pid)
				return err
			}, func(c context.Context) error {
				var err error
				inserted, err = t.insert(c, ns, key)
				return err
			})
			return inserted, err
		}
	}
	return t.insert(ctx, ns, key)
}

// insert runs the INSERT.
func (t *sqlTx) insert(ctx context.Context, ns, key string) (bool, error) {
	t0 := time.Now()
	res, err := t.tx.ExecContext(ctx, t.ib.sql.Insert, t.ib.sql.InsertArgs(ns, key, t0)...)
	var n int64
	if err == nil {
		n, err = res.RowsAffected()
	}
	t.ib.count.Observe(time.Since(t0), err)
	return n > 0, err
}

func (t *sqlTx) RollbackTo(ctx context.Context) error {
	for _, q := range [...]string{`ROLLBACK TO SAVEPOINT ` + savepoint, `RELEASE SAVEPOINT ` + savepoint} {
		t0 := time.Now()
		_, err := t.tx.ExecContext(ctx, q)
		t.ib.count.Observe(time.Since(t0), err)
		if err != nil {
			return err
		}
	}
	return nil
}

func (t *sqlTx) Commit(ctx context.Context) error {
	// The settlement's deadline (the receiver's SettleTimeout) ends the
	// transaction's context, which makes the driver give up a COMMIT that
	// hangs (a lock wait, a dead peer).
	defer context.AfterFunc(ctx, t.cancel)()
	defer t.cancel()
	t0 := time.Now()
	err := t.tx.Commit()
	t.ib.count.Observe(time.Since(t0), err)
	return err
}

func (t *sqlTx) Rollback(ctx context.Context) error {
	defer context.AfterFunc(ctx, t.cancel)()
	defer t.cancel()
	t0 := time.Now()
	err := t.tx.Rollback()
	if !errors.Is(err, sql.ErrTxDone) {
		t.ib.count.Observe(time.Since(t0), err)
	}
	return err
}

func (t *sqlTx) Value() any { return t.tx }

// Handler returns a receiver.Handler that runs h with the delivery's open
// inbox transaction: h applies the message's effect through tx and returns
// nil (the inbox commits the effect and the key together, then the
// transport acknowledges) or an error (the inbox rolls both back; the
// delivery is retried or dead-lettered). h must not commit or roll back
// tx, and must not apply effects outside it that have to happen once.
//
// A delivery that reaches the returned handler without an inbox
// transaction (no Inbox among the receiver's selectors, the
// MissingKeyProcess policy, or a duplicate handed over under
// DuplicateDeliver) fails with ErrNoTx: h never runs without the
// transaction. Handler panics on a nil h.
func Handler(h func(ctx context.Context, tx *sql.Tx, m *receiver.Message) error) receiver.Handler {
	if h == nil {
		panic("inbox: Handler(nil)")
	}
	return func(ctx context.Context, m *receiver.Message) error {
		tx, ok := Tx(ctx)
		if !ok {
			if m.Duplicate {
				return fmt.Errorf("%w (a duplicate handed over under DuplicateDeliver has none: use another duplicate policy with the inbox)", ErrNoTx)
			}
			return ErrNoTx
		}
		return h(ctx, tx, m)
	}
}

// Contains reports whether key is recorded under namespace (both as given
// to the inbox, before hashing). It is for tests and tools.
func (ib *Inbox) Contains(ctx context.Context, namespace, key string) (bool, error) {
	var ok bool
	err := ib.db.QueryRowContext(ctx, ib.sql.Contains,
		inboxsql.StorageKey(namespace, ib.o.MaxKeyLength), inboxsql.StorageKey(key, ib.o.MaxKeyLength)).Scan(&ok)
	if err != nil {
		return false, fmt.Errorf("inbox: contains: %w", err)
	}
	return ok, nil
}

// Purge deletes the rows recorded before olderThan and returns how many.
// It works in batches of at most Options.PurgeBatch rows, each one short
// statement (its own transaction) that walks the recorded_at index, oldest
// first, and stops after the first short batch; on PostgreSQL it skips
// rows locked by a running transaction. On an error or a cancelled ctx it
// returns the rows deleted so far with the error. A redelivery of a purged
// key is treated as new.
func (ib *Inbox) Purge(ctx context.Context, olderThan time.Time) (int64, error) {
	var total int64
	for {
		if err := ctx.Err(); err != nil {
			return total, err
		}
		t0 := time.Now()
		res, err := ib.db.ExecContext(ctx, ib.sql.Purge, ib.sql.Time(olderThan), ib.o.PurgeBatch)
		var n int64
		if err == nil {
			n, err = res.RowsAffected()
		}
		ib.count.Observe(time.Since(t0), err)
		if err != nil {
			return total, fmt.Errorf("inbox: purge: %w", err)
		}
		total += n
		if n < int64(ib.o.PurgeBatch) {
			return total, nil
		}
	}
}

// PurgeExpired deletes the rows older than Options.Retention (see Purge).
func (ib *Inbox) PurgeExpired(ctx context.Context) (int64, error) {
	return ib.Purge(ctx, time.Now().Add(-ib.o.Retention))
}
