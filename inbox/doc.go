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
//	h := receiver.Wrap(inbox.Handler(func(ctx context.Context, tx *sql.Tx, m *receiver.Message) error {
//		_, err := tx.ExecContext(ctx, `UPDATE accounts SET balance = balance + 1 WHERE id = $1`, string(m.Body))
//		return err
//	}), receiver.WithSelectors(ib))
//
// or receiver.Config.Selectors, or the Inbox field of the STOMP and
// RabbitMQ consumers' Config.
//
// # The flow of one delivery
//
// The receiver's memory tier runs first: an in-process redelivery never
// touches the database. Then Select begins a transaction
// (Options.Isolation) and inserts (namespace, key) with ON CONFLICT DO
// NOTHING. A row already there is a confirmed duplicate: the transaction is
// rolled back and the delivery rejected with reason "inbox" (the duplicate
// policy acknowledges it; the handler does not run). Otherwise the handler
// runs with the open transaction. When it returns nil the inbox commits,
// and only then does the transport acknowledge. When it fails or panics
// the inbox rolls back (effect and key together) and the delivery goes the
// receiver's retry and dead-letter path. A failed COMMIT, including one
// whose outcome is unknown because the connection broke during it, is a
// requeue, never an acknowledgement: the redelivery finds the key or does
// not, and is right either way. A handler that commits or rolls back the
// transaction itself makes the settlement fail with ErrTxEnded (a requeue,
// never an acknowledgement).
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
//   - Competing deliveries of one key (two consumers, two machines): the
//     second INSERT waits in the database for the first transaction (its
//     unique index on PostgreSQL, the write lock on SQLite) and then finds
//     the key (duplicate) or not (the first rolled back: new work). Exactly
//     one effect commits; no lease is involved.
//
// It does not cover effects outside the transaction (an HTTP call, a
// message sent, a write to another database): those can happen twice. And
// it remembers a key for at least Options.Retention: Purge and PurgeExpired
// delete older rows, and a redelivery of a purged key is treated as new.
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
// # Connections
//
// A delivery holds one pool connection from Select until its settlement,
// the whole time the handler runs. Size the pool (sql.DB.SetMaxOpenConns)
// to at least the consumer's concurrency, plus what the handler itself
// opens outside the transaction; the STOMP and RabbitMQ consumers refuse
// a smaller pool at New (see Inbox.MaxOpenConns).
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
// database). SQLite admits one writer at a time: deliveries of a process
// and of other processes sharing the file run their transactions one after
// the other, each holding the write lock while its handler runs. A delivery
// waits for the lock up to the busy timeout and is then requeued (never
// acknowledged), so make the busy timeout longer than the slowest handler.
//
// # Metrics
//
// Options.Metrics counts every database call in the receiver.Metrics store
// counters (StoreCalls, StoreNanos, StoreBuckets) and failed calls in
// StoreErrors: a new key costs three (BEGIN, INSERT, COMMIT), a recorded
// one three (BEGIN, INSERT, ROLLBACK). Duplicates the inbox rejects are
// counted by the receiver under the reason "inbox" (DuplicatesOther).
package inbox
