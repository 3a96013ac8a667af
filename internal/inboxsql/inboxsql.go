// Package inboxsql holds what the transactional inbox's two front ends
// (package inbox on database/sql, package inbox/pgxinbox on pgx) share: the
// table's SQL for each dialect, table-name validation, how keys and
// namespaces are stored, and how database calls are counted in
// receiver.Metrics.
package inboxsql

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/acemq/msgaudit/idempotency"
	"github.com/acemq/msgaudit/internal/claimkit"
	"github.com/acemq/msgaudit/internal/keyjoin"
	"github.com/acemq/msgaudit/internal/pgtable"
	"github.com/acemq/msgaudit/internal/storelat"
	"github.com/acemq/msgaudit/receiver"
)

// Defaults shared by both front ends.
const (
	// DefaultTable is the inbox table's name when Options.Table is "".
	DefaultTable = "msgaudit_inbox"
	// DefaultRetention is how long a row is kept at least (the stores'
	// default retention).
	DefaultRetention = claimkit.DefaultRetention
	// DefaultMaxKeyLength is the longest key or namespace stored verbatim.
	DefaultMaxKeyLength = claimkit.DefaultMaxKeyLength
	// DefaultPurgeBatch is how many rows one Purge statement deletes.
	DefaultPurgeBatch = 1000
	// DefaultMaxBatch is the most deliveries one COMMIT covers.
	DefaultMaxBatch = 32
	// DefaultLinger is how long a batch takes new members at most.
	DefaultLinger = 5 * time.Millisecond
	// DefaultLanes is PostgreSQL's number of lanes when neither the
	// options nor a consumer set it.
	DefaultLanes = 4
)

// HashedProbe is a namespace and key no delivery stores (StorageKey
// hashes every value that starts with claimkit.HashedKeyPrefix), for
// probing a table's INSERT inside a transaction that is rolled back.
const HashedProbe = claimkit.HashedKeyPrefix + "probe"

// Savepoint is the name of every batch member's savepoint.
const Savepoint = "msgaudit_inbox_member"

// BatchSavepoint is the savepoint a lane takes when its transaction
// begins and releases just before its COMMIT: the RELEASE fails when a
// handler ended the transaction with a COMMIT or ROLLBACK statement.
const BatchSavepoint = "msgaudit_inbox_batch"

// indexSuffix names the recorded_at index: table name + suffix.
const indexSuffix = "_recorded_at_idx"

// tableRE accepts [schema.]name of plain identifiers, the name at most 47
// bytes so that it plus indexSuffix fits PostgreSQL's 63-byte limit.
var tableRE = regexp.MustCompile(`^(?:([A-Za-z_][A-Za-z0-9_]{0,62})\.)?([A-Za-z_][A-Za-z0-9_]{0,46})$`)

// SQL is the inbox's statements for one table in one dialect. Insert takes
// (namespace, key) and, for SQLite, the recording time as Unix
// nanoseconds; it affects one row when the key is new and none when it is
// recorded already. Contains takes (namespace, key). Purge takes (cutoff,
// batch) and deletes at most batch rows recorded before cutoff, oldest
// first, through the recorded_at index; on PostgreSQL it takes a third
// argument, the recording time to start from, and returns the number of
// rows deleted and the newest recording time among them (see Build).
type SQL struct {
	Create                  []string
	Insert, Contains, Purge string
	// Probe fails unless the database speaks the dialect.
	Probe string
	// PID returns PostgreSQL's server process id; "" on SQLite.
	PID string
	// Resolve returns the schema and persistence of the table the name
	// resolves to (pgtable.Query), taking Table; "" on SQLite. Run it in
	// the transaction that ran Create, after CreateLock.
	Resolve string
	// Table is the table's name as the statements write it (quoted).
	Table string
	// Postgres and MySQL tell the dialect (neither: SQLite).
	Postgres, MySQL bool
	// Cancel asks the server to cancel the statement of server process
	// PID ($1 or ?); "" on SQLite.
	Cancel string
	// Schema and Name are the table's schema ("" when unqualified) and
	// name, unquoted.
	Schema, Name string
	// Backlog samples the table, taking BacklogArgs: it returns the
	// number of rows (an estimate, see Backlog) and the oldest row's
	// recording time through the recorded_at index (on PostgreSQL its age
	// in microseconds of the server's clock; elsewhere Unix nanoseconds),
	// each NULL when unknown or the table is empty.
	Backlog string
}

// BacklogCountCap bounds the rows PostgreSQL's Backlog counts on a table
// the planner has no estimate for.
const BacklogCountCap = 10000

// CreateLock serialises PostgreSQL's Create transactions of concurrent
// processes, whose CREATE ... IF NOT EXISTS can otherwise collide in the
// catalog.
const CreateLock = `SELECT pg_advisory_xact_lock(hashtext('msgaudit inbox create'))`

// Kind is a database's SQL dialect.
type Kind uint8

// The dialects Build writes.
const (
	Postgres Kind = iota + 1
	SQLite
	MySQL
)

// MaxMySQLKey is the longest namespace or key, in bytes, a MySQL inbox
// table stores: each is a VARBINARY(1024) column, together 2,048 bytes of
// the 3,072 an InnoDB index key may hold. Options.MaxKeyLength may not be
// more; longer values are stored hashed (StorageKey).
const MaxMySQLKey = 1024

// Build validates table ("" = DefaultTable) and returns its statements
// in dialect kind.
func Build(table string, kind Kind) (SQL, error) {
	postgres := kind == Postgres
	if table == "" {
		table = DefaultTable
	}
	t, q, schema, name, err := Table(table, kind)
	if err != nil {
		return SQL{}, err
	}
	idx := q(name + indexSuffix)
	if postgres {
		return SQL{
			Postgres: true,
			Probe:    `SELECT current_setting('server_version_num')`,
			Create: []string{
				`CREATE TABLE IF NOT EXISTS ` + t + ` (
	namespace   text        NOT NULL,
	key         text        NOT NULL,
	recorded_at timestamptz NOT NULL DEFAULT now(),
	PRIMARY KEY (namespace, key)
)`,
				`CREATE INDEX IF NOT EXISTS ` + idx + ` ON ` + t + ` (recorded_at)`,
			},
			Insert:   `INSERT INTO ` + t + ` (namespace, key) VALUES ($1, $2) ON CONFLICT DO NOTHING`,
			PID:      `SELECT pg_backend_pid()`,
			Cancel:   CancelBackend,
			Schema:   schema,
			Name:     name,
			Resolve:  pgtable.Query,
			Table:    t,
			Contains: `SELECT EXISTS (SELECT 1 FROM ` + t + ` WHERE namespace = $1 AND key = $2)`,
			// Rows: the planner's estimate, or a count capped at
			// BacklogCountCap while the table was never analyzed
			// (reltuples -1) or analyzed empty (0).
			Backlog: `SELECT (SELECT CASE WHEN c.reltuples > 0 THEN c.reltuples::bigint
    ELSE (SELECT count(*) FROM (SELECT 1 FROM ` + t + ` LIMIT ` + fmt.Sprint(BacklogCountCap) + `) n) END
  FROM pg_class c WHERE c.oid = $1::regclass),
  (SELECT (extract(epoch FROM now() - recorded_at) * 1000000)::bigint FROM ` + t + ` ORDER BY recorded_at LIMIT 1)`,
			// $3 is where the batch starts: the newest recorded_at the
			// previous batch deleted. Starting the index scan there, not
			// at the oldest entry, skips the index entries of the rows
			// earlier batches deleted, which stay until VACUUM: from the
			// oldest entry every batch would walk past all of them, and a
			// purge of millions of rows would slow down batch after batch.
			Purge: `WITH d AS (DELETE FROM ` + t + ` WHERE (namespace, key) IN (SELECT namespace, key FROM ` + t +
				` WHERE recorded_at >= $3 AND recorded_at < $1 ORDER BY recorded_at LIMIT $2 FOR UPDATE SKIP LOCKED) RETURNING recorded_at)
SELECT count(*), max(recorded_at) FROM d`,
		}, nil
	}
	if kind == MySQL {
		// Binary columns: keys compare byte for byte (a utf8mb4 column
		// would compare under a collation, where "a" = "A" = "a ", and two
		// keys would be one). ENGINE=InnoDB: the key must commit with the
		// effect (New checks the engine of a table that existed).
		// recorded_at is Unix nanoseconds, free of time zones. The INSERT
		// updates nothing on a duplicate, so it affects one row when the
		// key is new and none when it is recorded (New refuses a
		// connection that counts found rows instead); unlike INSERT
		// IGNORE, every other error stays an error.
		return SQL{
			MySQL: true,
			Probe: `SELECT @@version`,
			Create: []string{`CREATE TABLE IF NOT EXISTS ` + t + ` (
	namespace   VARBINARY(1024) NOT NULL,
	` + "`key`" + `       VARBINARY(1024) NOT NULL,
	recorded_at BIGINT          NOT NULL,
	PRIMARY KEY (namespace, ` + "`key`" + `),
	INDEX ` + idx + ` (recorded_at)
) ENGINE=InnoDB`},
			Insert:   `INSERT INTO ` + t + ` (namespace, ` + "`key`" + `, recorded_at) VALUES (?, ?, ?) ON DUPLICATE KEY UPDATE recorded_at = recorded_at`,
			Contains: `SELECT EXISTS (SELECT 1 FROM ` + t + ` WHERE namespace = ? AND ` + "`key`" + ` = ?)`,
			Purge:    `DELETE FROM ` + t + ` WHERE recorded_at < ? ORDER BY recorded_at LIMIT ?`,
			Backlog: `SELECT (SELECT TABLE_ROWS FROM information_schema.TABLES WHERE TABLE_SCHEMA = COALESCE(NULLIF(?, ''), DATABASE()) AND TABLE_NAME = ?),
  (SELECT recorded_at FROM ` + t + ` FORCE INDEX (` + idx + `) ORDER BY recorded_at LIMIT 1)`,
			PID:     `SELECT CONNECTION_ID()`,
			Cancel:  `KILL QUERY ?`,
			Resolve: `SELECT ENGINE FROM information_schema.TABLES WHERE TABLE_SCHEMA = COALESCE(NULLIF(?, ''), DATABASE()) AND TABLE_NAME = ?`,
			Schema:  schema,
			Name:    name,
			Table:   t,
		}, nil
	}
	// SQLite: CREATE INDEX names the schema on the index, not the table.
	sidx := idx
	if schema != "" {
		sidx = q(schema) + "." + idx
	}
	return SQL{
		Probe: `SELECT sqlite_version()`,
		Table: t,
		Create: []string{
			`CREATE TABLE IF NOT EXISTS ` + t + ` (
	namespace   TEXT    NOT NULL,
	key         TEXT    NOT NULL,
	recorded_at INTEGER NOT NULL,
	PRIMARY KEY (namespace, key)
)`,
			`CREATE INDEX IF NOT EXISTS ` + sidx + ` ON ` + q(name) + ` (recorded_at)`,
		},
		Insert:   `INSERT INTO ` + t + ` (namespace, key, recorded_at) VALUES (?1, ?2, ?3) ON CONFLICT DO NOTHING`,
		Contains: `SELECT EXISTS (SELECT 1 FROM ` + t + ` WHERE namespace = ?1 AND key = ?2)`,
		Purge: `DELETE FROM ` + t + ` WHERE rowid IN (SELECT rowid FROM ` + t +
			` WHERE recorded_at < ?1 ORDER BY recorded_at LIMIT ?2)`,
		// Rows: the span of rowids, each end one step down the rowid
		// B-tree (a min and a max in one SELECT would scan the table).
		Backlog: `SELECT (SELECT max(rowid) FROM ` + t + `) - (SELECT min(rowid) FROM ` + t + `) + 1,
  (SELECT recorded_at FROM ` + t + ` ORDER BY recorded_at LIMIT 1)`,
	}, nil
}

// Table validates table, [schema.]name of plain identifiers with the name
// at most 47 bytes, and refuses a temporary schema (whose rows would belong
// to one connection). It returns the name quoted for kind, the quoting
// function for names derived from it (indexes), and the schema ("" when
// unqualified) and name unquoted.
func Table(table string, kind Kind) (quoted string, q func(string) string, schema, name string, err error) {
	m := tableRE.FindStringSubmatch(table)
	if m == nil {
		return "", nil, "", "", fmt.Errorf("invalid table name %q (want [schema.]name of letters, digits and '_', the name at most 47 bytes)", table)
	}
	schema, name = m[1], m[2]
	switch {
	case kind == Postgres && pgtable.TempSchema.MatchString(schema):
		return "", nil, "", "", fmt.Errorf("table %q is in a temporary schema: its rows would belong to one connection and vanish with it, and a redelivery on another connection or after a restart would be applied again", table)
	case kind == SQLite && (strings.EqualFold(schema, "temp") || strings.EqualFold(schema, "temporary")):
		return "", nil, "", "", fmt.Errorf("table %q is in SQLite's temporary schema: its rows would belong to one connection and vanish when it closes", table)
	}
	q = func(s string) string { return `"` + s + `"` }
	if kind == MySQL {
		q = func(s string) string { return "`" + s + "`" }
	}
	quoted = q(name)
	if schema != "" {
		quoted = q(schema) + "." + q(name)
	}
	return quoted, q, schema, name, nil
}

// Time returns t as the dialect stores it: itself for PostgreSQL, Unix
// nanoseconds for SQLite.
func (s SQL) Time(t time.Time) any {
	if s.Postgres {
		return t
	}
	return t.UnixNano()
}

// BacklogArgs returns the arguments of Backlog.
func (s SQL) BacklogArgs() []any {
	switch {
	case s.Postgres:
		return []any{s.Table}
	case s.MySQL:
		return []any{s.Schema, s.Name}
	}
	return nil
}

// BacklogOf turns Backlog's columns into an idempotency.Backlog, now being
// the client's clock (the one SQLite and MySQL rows are recorded with).
func (s SQL) BacklogOf(rows, oldest sql.NullInt64, now time.Time) idempotency.Backlog {
	b := idempotency.Backlog{Rows: max(rows.Int64, 0)}
	switch {
	case !oldest.Valid:
	case s.Postgres:
		b.OldestRow = max(time.Duration(oldest.Int64)*time.Microsecond, 0)
	default:
		b.OldestRow = max(time.Duration(now.UnixNano()-oldest.Int64), 0)
	}
	return b
}

// InsertArgs returns the arguments of Insert.
func (s SQL) InsertArgs(namespace, key string, now time.Time) []any {
	if s.Postgres {
		return []any{namespace, key}
	}
	return []any{namespace, key, now.UnixNano()}
}

// StorageKey returns s as stored: verbatim when it is at most max bytes of
// valid UTF-8 without NUL (which PostgreSQL text cannot hold) and does not
// start with claimkit.HashedKeyPrefix; otherwise that prefix and the hex
// SHA-256 of s. A verbatim value never starts with the prefix and a hashed
// one always does, so two different values never share a stored form
// (short of a SHA-256 collision). Values are never truncated.
func StorageKey(s string, max int) string {
	if len(s) <= max && utf8.ValidString(s) && strings.IndexByte(s, 0) < 0 && !strings.HasPrefix(s, claimkit.HashedKeyPrefix) {
		return s
	}
	sum := sha256.Sum256([]byte(s))
	return claimkit.HashedKeyPrefix + hex.EncodeToString(sum[:])
}

// Namespacer returns the namespace function of receiver.Config.Namespace: ns,
// or the message's destination when ns is ""; topic deliveries append "#"
// and the consumer, escaped by keyjoin.Topic so that two different pairs
// never share a namespace.
func Namespacer(ns string) func(m *receiver.Message) string {
	return func(m *receiver.Message) string {
		base := ns
		if base == "" {
			base = m.Destination
		}
		if m.IsTopic() {
			return keyjoin.Topic(base, m.Consumer)
		}
		return base
	}
}

// Counter counts database calls in a receiver.Metrics's store counters.
// Its zero value and a Counter of nil Metrics count nothing.
type Counter struct {
	m      *receiver.Metrics
	bounds []time.Duration
}

// NewCounter returns a Counter for m (nil allowed).
func NewCounter(m *receiver.Metrics) Counter {
	return Counter{m: m, bounds: storelat.Bounds[:]}
}

// Observe counts one call that took d (StoreCalls, StoreNanos,
// StoreBuckets) and, when err is non-nil, an error (StoreErrors).
func (c Counter) Observe(d time.Duration, err error) {
	m := c.m
	if m == nil {
		return
	}
	m.StoreCalls.Add(1)
	m.StoreNanos.Add(uint64(d))
	for i, b := range c.bounds {
		if d <= b {
			m.StoreBuckets[i].Add(1)
			break
		}
	}
	if err != nil {
		m.StoreErrors.Add(1)
	}
}

// sqlStater is implemented by PostgreSQL driver errors (pgconn.PgError).
type sqlStater interface{ SQLState() string }

// Conflict reports whether err is a PostgreSQL serialization failure
// (SQLSTATE 40001) or deadlock (40P01), or MySQL's deadlock (error 1213,
// which rolled the whole transaction back) or lock-wait timeout (1205,
// which rolled back only the statement): the transaction lost a race
// and the delivery must be retried.
func Conflict(err error) bool {
	var s sqlStater
	if errors.As(err, &s) {
		switch s.SQLState() {
		case "40001", "40P01":
			return true
		}
	}
	switch MySQLErrno(err) {
	case 1213, 1205:
		return true
	}
	return false
}

// mysqlErrRE matches the text of a go-sql-driver/mysql server error,
// "Error 1213 (40001): ..." (or "Error 1213: ..." without a state).
var mysqlErrRE = regexp.MustCompile(`^Error ([0-9]{4,5})(?: \([0-9A-Z]{5}\))?: `)

// MySQLErrno returns the MySQL server error number of err or of an error
// it wraps, 0 if there is none. The inbox imports no driver, so it reads
// the number from go-sql-driver/mysql's error text (its tests pin the
// format against a real server).
func MySQLErrno(err error) int {
	for e := err; e != nil; e = errors.Unwrap(e) {
		if m := mysqlErrRE.FindStringSubmatch(e.Error()); m != nil {
			n := 0
			for _, c := range m[1] {
				n = n*10 + int(c-'0')
			}
			return n
		}
	}
	return 0
}

// Describe wraps err from operation op with the inbox prefix, naming a
// serialization failure or deadlock as such.
func Describe(op string, err error) error {
	if Conflict(err) {
		return fmt.Errorf("inbox: %s: lost a serialization race (the delivery is requeued): %w", op, err)
	}
	return fmt.Errorf("inbox: %s: %w", op, err)
}

// CancelBackend is PostgreSQL's statement that asks server process $1 to
// cancel the statement it is running (a no-op when it runs none).
const CancelBackend = `SELECT pg_cancel_backend($1)`

// hardAfter is how long Guard waits after a server-side cancel before it
// cancels the statement's own context, breaking its connection.
const hardAfter = 5 * time.Second

// Guard runs op under a context detached from ctx: when ctx ends while op
// runs, cancel asks the server to cancel op's statement (PostgreSQL's
// pg_cancel_backend through another connection), so the statement fails
// and the connection and its transaction survive (a ROLLBACK TO SAVEPOINT
// then undoes only that statement). Cancelling op's own context instead
// would make the driver break the connection, and with it the whole
// transaction. If op has not returned hardAfter after the server-side
// cancel, its context is cancelled all the same. Guard returns after any
// cancel it sent was answered, so the cancel cannot reach a later
// statement.
func Guard(ctx context.Context, cancel func(context.Context) error, op func(context.Context) error) error {
	if ctx.Done() == nil { // never cancelled
		return op(ctx)
	}
	octx, hard := context.WithCancel(context.WithoutCancel(ctx))
	defer hard()
	done := make(chan struct{})
	var timer *time.Timer
	stop := context.AfterFunc(ctx, func() {
		defer close(done)
		cctx, c := context.WithTimeout(context.WithoutCancel(ctx), hardAfter)
		_ = cancel(cctx)
		c()
		timer = time.AfterFunc(hardAfter, hard)
	})
	err := op(octx)
	if !stop() {
		<-done
		timer.Stop()
	}
	return err
}

// Broken reports whether err is PostgreSQL's "current transaction is
// aborted" (SQLSTATE 25P02): an earlier statement of the transaction
// failed and nothing but a rollback is accepted.
func Broken(err error) bool {
	var s sqlStater
	return errors.As(err, &s) && s.SQLState() == "25P02"
}

// BatchLimits validates and defaults the batching options: a zero value
// means its default, a negative one is an error.
func BatchLimits(lanes, maxBatch int, linger time.Duration) (int, int, time.Duration, error) {
	switch {
	case lanes < 0:
		return 0, 0, 0, fmt.Errorf("negative Lanes %d", lanes)
	case maxBatch < 0:
		return 0, 0, 0, fmt.Errorf("negative MaxBatch %d", maxBatch)
	case linger < 0:
		return 0, 0, 0, fmt.Errorf("negative Linger %v", linger)
	}
	if lanes == 0 {
		lanes = DefaultLanes
	}
	if maxBatch == 0 {
		maxBatch = DefaultMaxBatch
	}
	if linger == 0 {
		linger = DefaultLinger
	}
	return lanes, maxBatch, linger, nil
}

// MaxPostgresBatch is the most members a batch may have on PostgreSQL.
// Every member that writes runs under a savepoint of its own, a
// subtransaction with an id, and so does the lane's BatchSavepoint around
// them. A backend caches 64 such ids; past that, every snapshot taken on
// the server while the batch is open is marked overflowed, and each
// session reading the batch's rows looks each of them up in pg_subtrans
// (inbox's BenchmarkSubtransactionCache: 64 Subtrans SLRU accesses per
// batch of 63 members, 7,367 per batch of 64, while four readers count
// the table).
const MaxPostgresBatch = 63

// PostgresBatch refuses a MaxBatch over MaxPostgresBatch.
func PostgresBatch(maxBatch int) error {
	if maxBatch > MaxPostgresBatch {
		return fmt.Errorf("MaxBatch %d is over %d on PostgreSQL: a batch of more members holds more than the 64 subtransactions a backend caches (a savepoint per member and one per batch), which makes every snapshot on the server overflow and slows every reader of the table", maxBatch, MaxPostgresBatch)
	}
	return nil
}

// Limits validates and defaults the numeric options: a zero retention,
// key length or purge batch means its default, a negative one is an error.
func Limits(retention time.Duration, maxKeyLength, purgeBatch int) (time.Duration, int, int, error) {
	switch {
	case retention < 0:
		return 0, 0, 0, fmt.Errorf("negative Retention %v", retention)
	case maxKeyLength < 0:
		return 0, 0, 0, fmt.Errorf("negative MaxKeyLength %d", maxKeyLength)
	case purgeBatch < 0:
		return 0, 0, 0, fmt.Errorf("negative PurgeBatch %d", purgeBatch)
	}
	if retention == 0 {
		retention = DefaultRetention
	}
	if maxKeyLength == 0 {
		maxKeyLength = DefaultMaxKeyLength
	}
	if purgeBatch == 0 {
		purgeBatch = DefaultPurgeBatch
	}
	return retention, maxKeyLength, purgeBatch, nil
}
