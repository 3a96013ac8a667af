// Package inbox is the transactional inbox: it records each delivery's
// idempotency key in the same database transaction as the handler's
// effect, so "effect applied" and "message recorded" commit together or not
// at all. It works on database/sql and imports no driver: import
// modernc.org/sqlite or github.com/jackc/pgx/v5/stdlib yourself (package
// inbox/pgxinbox is the same on a pgx pool).
//
// An idempotency store outside the handler's database cannot do this: a
// process killed after the handler committed its effect but before the
// store's confirm leaves the claim open, and the redelivery applies the
// message again once the claim's lease lapses.
//
// # Use
//
// An *Inbox is a receiver.Selector; Handler gives the handler the
// delivery's transaction:
//
//	ib, err := inbox.New(ctx, db, inbox.Options{Dialect: inbox.PostgreSQL})
//	r, err := receiver.New(receiver.Config{Inbox: ib})
//	h := r.Wrap(inbox.Handler(func(ctx context.Context, tx *sql.Tx, m *receiver.Message) error {
//		_, err := tx.ExecContext(ctx, `UPDATE accounts SET balance = balance + 1 WHERE id = $1`, string(m.Body))
//		return err
//	}))
//
// or Pipeline.Inbox in the STOMP and RabbitMQ consumers' Config.
//
// # The flow of one delivery
//
// The receiver's memory tier runs first: an in-process redelivery never
// touches the database. Then Select takes a lane (see Batches), opens the
// delivery's savepoint in the lane's transaction (Options.Isolation), or
// begins it, and inserts (namespace, key) with ON CONFLICT DO NOTHING. A
// row already there is a confirmed duplicate: the delivery's savepoint is
// rolled back and the delivery rejected with reason "inbox" (the
// duplicate policy acknowledges it; the handler does not run). Otherwise
// the handler runs with the open transaction. When it returns nil its work
// stays in the transaction, and the delivery's settlement returns once the
// COMMIT covering it succeeded: only then does the transport acknowledge.
// When it fails or panics the inbox rolls back to the delivery's savepoint
// (effect and key together; the other deliveries of the batch keep
// theirs) and the delivery goes the receiver's retry and dead-letter path.
// A failed COMMIT, including one whose outcome is unknown because the
// connection broke during it, is a requeue of every delivery it covered,
// never an acknowledgement: each redelivery finds its key or does not, and
// is right either way. A handler that commits or rolls back the
// transaction itself makes its settlement fail with ErrTxEnded, and the
// other deliveries of its batch with ErrBatchAborted (requeues, never
// acknowledgements). One that does so with a statement (COMMIT, ROLLBACK,
// END or ABORT run through tx), which the driver does not see, is found
// out just before the batch's COMMIT: the lane releases a savepoint it
// took when the transaction began, and when that fails it rolls back
// whatever is open (on SQLite, the transaction a later delivery's
// SAVEPOINT began) and every delivery of the batch fails with
// ErrBatchAborted. Whatever such a handler runs after its COMMIT or
// ROLLBACK statement is outside any inbox transaction: it commits on its
// own, without the key, and runs again on the redelivery.
//
// # Batches
//
// A lane is one open transaction. Deliveries take a free lane one at a
// time (a delivery waiting for a lane holds no connection) and run their
// Select, handler and settlement in it, each under its own savepoint (the
// first of a batch needs none: the transaction's start, and the savepoint
// the lane checks before its COMMIT, is its boundary). When a
// delivery has settled, the lane goes to the next delivery waiting for it,
// with the transaction still open, unless the batch holds
// Options.MaxBatch deliveries or is Options.Linger old; the lane commits
// then, and whenever no delivery is waiting, so a lone delivery on an idle
// inbox commits at once. One COMMIT, one disk flush, covers the batch.
//
// What batching changes, and what it does not:
//
//   - A delivery is acknowledged only after the COMMIT covering it, as
//     before; a failed or unknown COMMIT requeues every delivery it covered.
//   - A failing, panicking or duplicate delivery undoes only its own work
//     (ROLLBACK TO SAVEPOINT); the others of its batch commit once.
//   - Errors of the INSERT (a serialization failure, a deadlock, a wait on
//     the unique index bounded by the delivery's context) roll back to the
//     savepoint and requeue that delivery alone. A later member's wait is
//     ended on the server (pg_cancel_backend through another pool
//     connection, allowed for the role's own sessions), not by breaking
//     the lane's connection, which would lose the whole batch. A deadlock between two
//     lanes, each holding a key the other's next delivery inserts, is
//     broken by PostgreSQL's deadlock detector: one delivery is requeued,
//     its lane commits, and the other finds the key.
//   - A handler that ends the transaction itself, returns nil after a
//     statement failed (PostgreSQL then refuses everything but a
//     rollback), or a lost connection loses the whole batch: every
//     delivery of it is requeued, none acknowledged. A handler must return
//     its statements' errors.
//   - The work of a batch's deliveries holds its locks until the batch
//     commits, which is later than a delivery alone would commit.
//   - A delivery of a key whose first delivery is in the same open batch is
//     requeued (reason "in-flight"); the receiver's memory tier normally
//     holds it back before it gets there.
//
// MaxBatch 1 commits every delivery alone: one transaction per delivery,
// no savepoint but the lane's own.
//
// # Guarantees
//
//   - SIGKILL (or a crash, or a lost connection) between the effect and the
//     commit: the database rolls the transaction back, effect and key
//     together; the redelivery runs the handler once more, for the first
//     time as far as the database is concerned.
//   - SIGKILL between the commit and the transport's acknowledgement: the
//     redelivery finds the key and is acknowledged as a duplicate without
//     running the handler.
//   - SIGKILL in the middle of a batch: the database rolls back every
//     delivery of it; after its COMMIT: every redelivery is a duplicate.
//   - Competing deliveries of one key (two consumers, two machines): the
//     second INSERT waits in the database for the first transaction (its
//     unique index on PostgreSQL, the write lock on SQLite) and then finds
//     the key (duplicate) or not (the first rolled back: new work). Exactly
//     one effect commits; no lease is involved.
//
// It does not cover effects outside the transaction (an HTTP call, a
// message sent, a write to another database): those can happen twice. And
// it remembers a key for at least Options.Retention: Purge, PurgeExpired
// and the automatic purge (Options.PurgeInterval, off by default) delete
// older rows, and a redelivery of a purged key is treated as new.
//
// # Isolation
//
// PostgreSQL: READ COMMITTED (the default) is enough: the waiting INSERT
// sees the competing transaction's outcome. Under REPEATABLE READ and
// SERIALIZABLE a competing commit makes the INSERT (or the handler's
// statements, or the COMMIT) fail with a serialization failure (SQLSTATE
// 40001) or a deadlock (40P01): that delivery is requeued, never
// acknowledged, and its retry finds the key. SQLite transactions are
// serializable; only the default and sql.LevelSerializable are accepted.
//
// # Connections and lanes
//
// Every lane holds one pool connection while its transaction is open.
// Options.Lanes sets how many there are: one on SQLite by default (one
// writer at a time), and on PostgreSQL the concurrency of the STOMP or
// RabbitMQ consumer the inbox is given to (Inbox.SizeLanes; 4
// without one). Handlers of one lane run one after the other, so the lanes
// bound how many handlers run at once. Size the pool
// (sql.DB.SetMaxOpenConns) to at least Lanes, plus what the handler
// itself opens outside the transaction; the consumers refuse a smaller
// pool, and more lanes than handlers (a delivery holding a lane must
// always find a handler), at New (see Inbox.MaxOpenConns). Keep as many
// connections idle (sql.DB.SetMaxIdleConns): database/sql keeps 2 by
// default and closes every other connection when its transaction ends, so
// with more lanes than that most batches would open a new connection (on
// PostgreSQL a new server process).
//
// # SQLite
//
// The DSN must make every transaction BEGIN IMMEDIATE and give connections
// a busy timeout, so a delivery takes the write lock at BEGIN and waits
// for a competing writer instead of failing at once. With
// modernc.org/sqlite:
//
//	file.db?_txlock=immediate&_pragma=busy_timeout(5000)&_pragma=journal_mode(WAL)
//
// New refuses a connection without a busy timeout, and, when the pool
// allows two connections, one whose transactions begin DEFERRED. Use a
// file, not ":memory:" (each connection of a pool would get its own
// database). SQLite admits one writer at a time: batches of a process and
// of other processes sharing the file run their transactions one after
// the other, each holding the write lock while its handlers run. A lane
// waits for the lock up to the busy timeout and its delivery is then
// requeued (never acknowledged), so make the busy timeout longer than the
// slowest batch (MaxBatch handlers, or Linger plus one handler).
//
// Keep synchronous at SQLite's default, FULL (or say
// _pragma=synchronous(FULL)). A commit survives a crash of the process
// (SIGKILL) with FULL and with NORMAL alike, but in WAL mode NORMAL can
// roll back the last commits on a power loss or an operating-system crash,
// and the broker has already had those messages acknowledged: their effects
// would be lost, not applied twice. (The idempotency store can default to
// NORMAL because what it loses there is a confirmation: a message applied
// again, never one lost.)
//
// # Behind a connection pooler
//
// Behind a pooler in transaction mode (PgBouncer without
// max_prepared_statements, such as Debian's 1.18), pgx's statement cache
// makes deliveries fail with SQLSTATE 26000 or 42P05; they are requeued,
// never acknowledged. Add default_query_exec_mode=exec to the URL given to
// sql.Open("pgx", …), or set ConnConfig.DefaultQueryExecMode to
// pgx.QueryExecModeExec on the pool given to pgxinbox. A delivery's
// transaction keeps one server connection from BEGIN to COMMIT, so the
// recorded key and the handler's writes still commit together
// (TestInboxThroughPooler here, TestPgxInboxThroughPooler in pgxinbox).
//
// # Metrics
//
// Options.Metrics counts every database call in the receiver.Metrics store
// counters (StoreCalls, StoreNanos, StoreBuckets) and failed calls in
// StoreErrors: a new key alone costs five (BEGIN, SAVEPOINT, INSERT,
// RELEASE, COMMIT), a recorded one four (BEGIN, SAVEPOINT, INSERT,
// ROLLBACK), one call fewer each on pgx, which sends the SAVEPOINT with
// the INSERT; a later member of a batch costs SAVEPOINT and INSERT (one
// call on pgx), plus ROLLBACK TO and RELEASE when it fails, and the batch
// BEGIN, SAVEPOINT, RELEASE and COMMIT, plus, on PostgreSQL through
// database/sql, one query of the server process's id when the batch gets a
// second member. Inbox.Batches counts the COMMITs and the deliveries they
// covered. Duplicates the inbox rejects are counted by the receiver under
// the reason "inbox" (DuplicatesOther).
package inbox
