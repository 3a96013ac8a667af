package inbox

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"github.com/acemq/msgaudit/idempotency"
	"github.com/acemq/msgaudit/internal/inboxcore"
	"github.com/acemq/msgaudit/internal/inboxlane"
	"github.com/acemq/msgaudit/internal/inboxsql"
	"github.com/acemq/msgaudit/internal/pgtable"
	"github.com/acemq/msgaudit/internal/purgeloop"
	"github.com/acemq/msgaudit/internal/sqldb"
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
	// MySQL is MySQL or MariaDB with InnoDB tables (for example through
	// github.com/go-sql-driver/mysql). See the package documentation for
	// what the inbox needs of the connection.
	MySQL
)

// String returns "postgresql", "sqlite" or "mysql".
func (d Dialect) String() string {
	switch d {
	case PostgreSQL:
		return "postgresql"
	case SQLite:
		return "sqlite"
	case MySQL:
		return "mysql"
	}
	return "dialect(" + strconv.Itoa(int(d)) + ")"
}

// Options configure an Inbox. Dialect is required; every other zero value
// means its default.
type Options struct {
	// Dialect is the database's SQL dialect; the zero value is an error.
	Dialect Dialect
	// Table is the inbox table, [schema.]name of letters, digits and '_'
	// (the name at most 47 bytes); it is quoted, so it is case-sensitive.
	// "" means "msgaudit_inbox". A temporary table is refused, named (pg_temp.,
	// SQLite's temp.) or reached through a search_path that starts with
	// pg_temp, and so is an unlogged PostgreSQL table: their keys vanish
	// with a connection or a crash.
	Table string
	// Namespace scopes the keys; "" means the message's destination. Topic
	// deliveries append "#" and the consumer (with '%' and '#' in it
	// written "%25" and "%23"), exactly like
	// receiver.Config.Namespace: each subscriber's copy is its own
	// unit of work.
	Namespace string
	// Retention is how long a recorded key is kept at least: PurgeExpired
	// and the automatic purge (PurgeInterval) delete rows older than it,
	// never younger ones. 0 means seven days, the idempotency stores'
	// default. A redelivery arriving after its key was purged is treated
	// as new.
	Retention time.Duration
	// Isolation is the isolation level of the delivery's transaction.
	// PostgreSQL: sql.LevelDefault (the server's default, normally READ
	// COMMITTED), LevelReadCommitted, LevelRepeatableRead or
	// LevelSerializable. SQLite: LevelDefault or LevelSerializable (SQLite
	// transactions are serializable). Any other level is an error at New.
	Isolation sql.IsolationLevel
	// MaxKeyLength is the longest key and namespace stored verbatim, in
	// bytes; longer ones are stored as "sha256:" and their hex SHA-256,
	// never truncated. 0 means 256.
	MaxKeyLength int
	// PurgeBatch bounds the rows one Purge statement deletes, each
	// statement its own short transaction, so a delivery's INSERT waits
	// at most for one batch; 0 means 1000, a batch of a few milliseconds.
	PurgeBatch int
	// PurgeInterval is how often the inbox deletes the rows older than
	// Retention on its own (PurgeExpired, in batches of PurgeBatch), from
	// a goroutine New starts and Close stops; the first purge runs one
	// interval after New, and after each batch it waits as long as the
	// batch took on PostgreSQL and MySQL, nine times as long on SQLite,
	// whose one write lock every delivery needs (docs/performance.md has
	// what it costs the deliveries). Zero, or a negative value, means no
	// automatic purge: call PurgeExpired yourself or keep every key. It is
	// off by default because, unlike an idempotency store's expired rows,
	// which no call sees any more, an inbox key older than Retention
	// still catches a late redelivery until it is deleted: turning the
	// purge on decides that a redelivery arriving after Retention is new
	// work, and only the application can decide that. An hour suits most:
	// the table then holds Retention plus at most an hour of keys.
	PurgeInterval time.Duration
	// Lanes is the number of lanes: transactions open at once, each
	// running its deliveries' handlers one after the other (see the
	// package documentation). 0 means one on SQLite (one writer at a
	// time) and, on PostgreSQL, the concurrency of the consumer the inbox
	// is given to (Inbox.SizeLanes), or 4 without one. The
	// pool must allow at least Lanes connections, on PostgreSQL better one
	// more: a batch member whose INSERT waits for another transaction past
	// its context is cancelled through a free connection (without one
	// within 5 s, its lane's connection is broken and its whole batch
	// requeued).
	Lanes int
	// MaxBatch is the most deliveries one COMMIT covers; 1 commits every
	// delivery alone (the savepoint-free flow of one transaction per
	// delivery). 0 means 32. On PostgreSQL it is at most 63: each member
	// is a savepoint, a subtransaction, and a batch of more would hold
	// more than the 64 subtransactions a backend caches, which slows
	// every session reading the table while the batch is open. A handler
	// that takes savepoints of its own adds to the count.
	MaxBatch int
	// Linger is how long after its first delivery a batch takes new
	// members while deliveries keep waiting for the lane; it then commits
	// at the next member boundary. A batch commits at once when no
	// delivery waits, so a lone delivery never lingers. 0 means
	// 5 ms.
	Linger time.Duration
	// Metrics receives the database calls' latency and errors in its
	// store counters (StoreCalls, StoreNanos, StoreBuckets, StoreErrors);
	// nil counts nothing. Duplicates the inbox rejects are counted by the
	// receiver (reason "inbox", in DuplicatesOther).
	Metrics *receiver.Metrics
	// Logger receives warnings (for example a configuration New could not
	// verify, or an automatic purge that failed); nil is silent.
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
	// rolled back the inbox's transaction itself (tx.Commit, tx.Rollback;
	// a COMMIT or ROLLBACK statement is found at the batch's COMMIT and
	// fails the whole batch with ErrBatchAborted). The delivery is requeued,
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
	// unusable, or whose lane lost its connection, and of every delivery
	// of a batch whose transaction a handler ended with a COMMIT or
	// ROLLBACK statement: its work is not known committed, and it is
	// requeued, never acknowledged (after a COMMIT statement its
	// redelivery may find its key: a confirmed duplicate).
	ErrBatchAborted = inboxlane.ErrAborted
)

// Inbox is the transactional inbox: a receiver.Selector that records each
// delivery's key in the same database transaction as the handler's effect.
// See the package documentation. An Inbox is safe for concurrent use.
type Inbox struct {
	core   *inboxcore.Core // keys, the read-only statements, the purge
	db     *sql.DB
	o      Options
	sql    inboxsql.SQL
	count  inboxsql.Counter
	log    *slog.Logger
	txOpts *sql.TxOptions
	lanes  *inboxlane.Pool
}

var _ receiver.Selector = (*Inbox)(nil)

// New returns an Inbox on db. It validates o, checks that db speaks
// o.Dialect (and, for SQLite, that the connections have a busy timeout and
// begin their transactions IMMEDIATE, as far as it can tell; see the
// package documentation), and creates the table (unique on namespace and
// key, indexed on the recording time) if it is missing. db stays the
// caller's: the Inbox never closes it. With Options.PurgeInterval set, New
// starts the automatic purge; Close stops it.
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
	case MySQL:
		switch o.Isolation {
		case sql.LevelDefault, sql.LevelReadCommitted, sql.LevelRepeatableRead, sql.LevelSerializable:
		default:
			return nil, fmt.Errorf("%w: isolation %v is not supported on MySQL (use default, read committed, repeatable read or serializable)", ErrConfig, o.Isolation)
		}
	case 0:
		return nil, fmt.Errorf("%w: Options.Dialect is required (inbox.PostgreSQL, inbox.SQLite or inbox.MySQL)", ErrConfig)
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
	if o.Dialect == PostgreSQL {
		if err := inboxsql.PostgresBatch(o.MaxBatch); err != nil {
			return nil, fmt.Errorf("%w: %v", ErrConfig, err)
		}
	}
	if o.Dialect == MySQL && o.MaxKeyLength > inboxsql.MaxMySQLKey {
		return nil, fmt.Errorf("%w: MaxKeyLength %d is over %d bytes, the most a MySQL inbox column holds (longer keys are stored hashed)", ErrConfig, o.MaxKeyLength, inboxsql.MaxMySQLKey)
	}
	st, err := inboxsql.Build(o.Table, map[Dialect]inboxsql.Kind{PostgreSQL: inboxsql.Postgres, SQLite: inboxsql.SQLite, MySQL: inboxsql.MySQL}[o.Dialect])
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrConfig, err)
	}
	if o.Table == "" {
		o.Table = inboxsql.DefaultTable
	}
	log := o.Logger
	if log == nil {
		log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	ib := &Inbox{db: db, o: o, sql: st, count: inboxsql.NewCounter(o.Metrics), log: log}
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
	if o.Dialect == MySQL {
		if err := ib.checkMySQL(ctx); err != nil {
			return nil, err
		}
	}
	pace := purgeloop.Server
	switch o.Dialect {
	case SQLite:
		pace = purgeloop.SQLite
	case MySQL:
		pace = purgeloop.MySQL
	}
	ib.core = inboxcore.New(inboxcore.Config{DB: sqldb.Std(db), SQL: st, Namespace: o.Namespace,
		MaxKeyLength: o.MaxKeyLength, PurgeBatch: o.PurgeBatch, Retention: o.Retention, Pace: pace,
		Count: ib.count, Lanes: ib.lanes, Sized: sized})
	ib.core.StartPurge(o.PurgeInterval, "inbox "+o.Table, log)
	return ib, nil
}

// Close stops the automatic purge (Options.PurgeInterval) and waits for a
// purge in progress to stop at its next statement; an Inbox without one
// has nothing to stop. Close closes nothing else: the database is the
// caller's. Call it once the consumer using the inbox has stopped; it
// always returns nil.
func (ib *Inbox) Close() error { return ib.core.Close() }

// PurgeStats returns the counters of the inbox's purges: the automatic
// ones and the calls of Purge and PurgeExpired.
func (ib *Inbox) PurgeStats() idempotency.PurgeStats { return ib.core.PurgeStats() }

// checkMySQL checks that the table is InnoDB (a MyISAM table has no
// transactions: the key would not commit or roll back with the effect)
// and that the connection counts changed rows, not found ones: with the
// driver's clientFoundRows=true, the INSERT of a recorded key would
// report a row and a duplicate would run again.
func (ib *Inbox) checkMySQL(ctx context.Context) error {
	var engine string
	if err := ib.db.QueryRowContext(ctx, ib.sql.Resolve, ib.sql.Schema, ib.sql.Name).Scan(&engine); err != nil {
		return fmt.Errorf("inbox: mysql: reading the engine of %s: %w", ib.o.Table, err)
	}
	if !strings.EqualFold(engine, "InnoDB") {
		return fmt.Errorf("%w: inbox table %s uses the %s engine, which has no transactions; the key must commit with the effect: ALTER TABLE ... ENGINE=InnoDB", ErrConfig, ib.o.Table, engine)
	}
	tx, err := ib.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("inbox: mysql: begin: %w", err)
	}
	defer func() { _ = tx.Rollback() }()
	probe := inboxsql.HashedProbe
	for i := range 2 {
		res, err := tx.ExecContext(ctx, ib.sql.Insert, ib.sql.InsertArgs(probe, probe, time.Now())...)
		if err != nil {
			return fmt.Errorf("inbox: mysql: probing the INSERT: %w", err)
		}
		n, err := res.RowsAffected()
		if err != nil {
			return fmt.Errorf("inbox: mysql: probing the INSERT: %w", err)
		}
		if i == 1 && n != 0 {
			return fmt.Errorf("%w: the connection reports %d row(s) for the INSERT of a recorded key: it counts found rows (clientFoundRows=true in the DSN?), so a duplicate would run again", ErrConfig, n)
		}
	}
	return nil
}

// create runs the schema statements; a PostgreSQL CREATE ... IF NOT EXISTS
// racing another process's can fail once on a catalog unique index, so a
// failed statement is tried a second time. On PostgreSQL see
// createPostgres.
func (ib *Inbox) create(ctx context.Context) error {
	if ib.sql.Postgres {
		return ib.createPostgres(ctx)
	}
	for _, q := range ib.sql.Create {
		if _, err := ib.db.ExecContext(ctx, q); err != nil {
			if _, err2 := ib.db.ExecContext(ctx, q); err2 != nil {
				return fmt.Errorf("inbox: creating table %s: %w", ib.o.Table, err)
			}
		}
	}
	return nil
}

// createPostgres runs the schema statements in one transaction, under an
// advisory lock that serialises concurrent creators (tried a second time
// if it fails all the same), and then checks on that connection what the
// table's name resolved to: a temporary table (an unqualified name under
// a search_path that starts with pg_temp) or an unlogged one loses
// recorded keys and is refused, its creation rolled back.
func (ib *Inbox) createPostgres(ctx context.Context) error {
	var err error
	for range 2 {
		var bad error
		if bad, err = ib.createPostgresTx(ctx); bad != nil {
			return fmt.Errorf("%w: inbox table %s: %v", ErrConfig, ib.o.Table, bad)
		}
		if err == nil {
			return nil
		}
	}
	return fmt.Errorf("inbox: creating table %s: %w", ib.o.Table, err)
}

// createPostgresTx is one attempt of createPostgres: bad is the table
// check's refusal, err any other failure.
func (ib *Inbox) createPostgresTx(ctx context.Context) (bad, err error) {
	tx, err := ib.db.BeginTx(ctx, nil)
	if err != nil {
		return nil, err
	}
	defer func() { _ = tx.Rollback() }()
	for _, q := range append([]string{inboxsql.CreateLock}, ib.sql.Create...) {
		if _, err := tx.ExecContext(ctx, q); err != nil {
			return nil, err
		}
	}
	var schema, persistence string
	err = tx.QueryRowContext(ctx, ib.sql.Resolve, ib.sql.Table).Scan(&schema, &persistence)
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return nil, err
	}
	if bad := pgtable.Check(ib.sql.Table, err == nil, schema, persistence); bad != nil {
		return bad, nil
	}
	return nil, tx.Commit()
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

// Namespace returns the namespace m's key is recorded under.
func (ib *Inbox) Namespace(m *receiver.Message) string { return ib.core.Namespace(m) }

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
func (ib *Inbox) SizeLanes(handlers int) int { return ib.core.SizeLanes(handlers) }

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
	return ib.core.Select(ctx, m)
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
	// The savepoint the COMMIT checks for (see sqlTx.Check).
	t0 = time.Now()
	_, err = tx.ExecContext(ctx, `SAVEPOINT `+inboxsql.BatchSavepoint)
	ib.count.Observe(time.Since(t0), err)
	if err != nil {
		_ = tx.Rollback()
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
	member bool  // a member's savepoint was taken
}

// stillOpen fails unless the lane's transaction is still open, on MySQL
// before a later member's savepoint. There, after a handler ended the
// transaction with a COMMIT or ROLLBACK statement, every later statement
// would commit on its own (autocommit), a member's key and effect each
// alone; releasing the latest savepoint fails instead (error 1305), and
// the batch is rolled back and requeued. The savepoint is taken again,
// so a later member or the check at COMMIT finds it.
func (t *sqlTx) stillOpen(ctx context.Context) error {
	stmts := []string{`RELEASE SAVEPOINT ` + savepoint}
	if !t.member {
		stmts = []string{`RELEASE SAVEPOINT ` + inboxsql.BatchSavepoint, `SAVEPOINT ` + inboxsql.BatchSavepoint}
	}
	for _, q := range stmts {
		t0 := time.Now()
		_, err := t.tx.ExecContext(ctx, q)
		t.ib.count.Observe(time.Since(t0), err)
		if err != nil {
			return err
		}
	}
	return nil
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
		if t.ib.sql.MySQL {
			if err := t.stillOpen(ctx); err != nil {
				return false, err
			}
		}
		t0 := time.Now()
		_, err := t.tx.ExecContext(ctx, `SAVEPOINT `+savepoint)
		t.ib.count.Observe(time.Since(t0), err)
		if err != nil {
			return false, err
		}
		t.member = true
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
				_, err := t.ib.db.ExecContext(c, t.ib.sql.Cancel, t.pid)
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
	// MySQL keeps one savepoint of a name (a new one replaces it), so
	// after this RELEASE none is left; stillOpen checks the batch's.
	t.member = false
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

// Check releases the savepoint begin took. It fails when a handler ended
// the transaction with a COMMIT or ROLLBACK statement: on PostgreSQL no
// transaction is open any more; on SQLite none is, or a later member's
// SAVEPOINT began a new one without the savepoint.
func (t *sqlTx) Check(ctx context.Context) error {
	t0 := time.Now()
	_, err := t.tx.ExecContext(ctx, `RELEASE SAVEPOINT `+inboxsql.BatchSavepoint)
	t.ib.count.Observe(time.Since(t0), err)
	return err
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
	return ib.core.Contains(ctx, namespace, key)
}

// Backlog samples the inbox (see idempotency.Backlog) in one statement.
// An inbox holds no claims: Held and OldestHeld are 0. OldestRow is the
// age of the first entry of the recorded_at index, by the clock the rows
// were recorded with (PostgreSQL's now(); the process's clock on SQLite
// and MySQL). Rows is an estimate on every dialect: on PostgreSQL the
// planner's (pg_class.reltuples, as of the last VACUUM or ANALYZE), or an
// exact count capped at 10,000 while the table was never analyzed or was
// analyzed empty; on MySQL and MariaDB information_schema.TABLES's
// TABLE_ROWS (InnoDB's estimate; MySQL 8 caches it for
// information_schema_stats_expiry, a day by default); on SQLite the span
// of rowids, max minus min plus one (two steps down the rowid B-tree),
// which counts the rows deleted out of recording order as if still there.
func (ib *Inbox) Backlog(ctx context.Context) (idempotency.Backlog, error) {
	return ib.core.Backlog(ctx)
}

// Purge deletes the rows recorded before olderThan and returns how many.
// It works in batches of at most Options.PurgeBatch rows, each one short
// statement (its own transaction) that walks the recorded_at index, oldest
// first, and stops after the first short batch; on PostgreSQL it skips
// rows locked by a running transaction, and each batch starts where the
// previous one stopped. Purge runs its batches back to back; the automatic
// purge (Options.PurgeInterval) runs the same ones with a pause after
// each. On an error or a cancelled ctx it returns the rows deleted so far
// with the error. A redelivery of a purged key is treated as new.
func (ib *Inbox) Purge(ctx context.Context, olderThan time.Time) (n int64, err error) {
	return ib.core.Purge(ctx, olderThan)
}

// PurgeExpired deletes the rows older than Options.Retention (see Purge).
func (ib *Inbox) PurgeExpired(ctx context.Context) (int64, error) { return ib.core.PurgeExpired(ctx) }
