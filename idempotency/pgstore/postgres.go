package pgstore

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/acemq/msgaudit/idempotency"
	"github.com/acemq/msgaudit/internal/claimkit"
	"github.com/acemq/msgaudit/internal/claimsql"
	"github.com/acemq/msgaudit/internal/pgpooler"
	"github.com/acemq/msgaudit/internal/pgtable"
	"github.com/acemq/msgaudit/internal/purgeloop"
	"github.com/acemq/msgaudit/internal/redact"
	"github.com/acemq/msgaudit/internal/sqldb/pgxdb"
	"github.com/acemq/msgaudit/internal/storeconn"
)

// defaultTable is the table when neither Options.Table nor the URL names
// one.
const defaultTable = "msgaudit_idempotency"

// Options configures a PostgreSQL store. The zero value means every
// default.
type Options struct {
	// Options are the settings every store shares. MaxKeyLength must not
	// exceed MaxKeyLength.
	idempotency.Options
	// Table is the store's table: a plain identifier (letters, digits,
	// '_'; at most 48 bytes), optionally qualified by a schema
	// ("audit.idempotency"). It is quoted, so it is case-sensitive. A
	// temporary schema (pg_temp, pg_temp_N) is refused: each connection of
	// the pool would have its own table there. Empty means the URL's
	// msgaudit_table parameter, else "msgaudit_idempotency"; when both are
	// set they must agree.
	Table string
}

// postgresTableParam is the query parameter of a postgres:// URL that names
// the table. It is removed before the URL reaches pgx, which would send an
// unknown parameter to the server as a run-time setting and fail.
const postgresTableParam = "msgaudit_table"

// postgresIndexSuffix names the expires_at index: table name + suffix.
const postgresIndexSuffix = "_expires_at_idx"

// postgresTableRE accepts a table name, optionally schema-qualified: plain
// identifiers only, so a name never needs more than quoting. The table part
// is at most 48 bytes so that it plus postgresIndexSuffix fits PostgreSQL's
// 63-byte identifier limit.
var postgresTableRE = regexp.MustCompile(`^(?:([A-Za-z_][A-Za-z0-9_]{0,62})\.)?([A-Za-z_][A-Za-z0-9_]{0,47})$`)

// MaxKeyLength is the largest Options.MaxKeyLength the PostgreSQL
// store accepts: a B-tree index entry holds at most about 2700 bytes (a
// third of an 8 KiB page), and a longer verbatim key fails with "index row
// size exceeds maximum" instead of being hashed.
const MaxKeyLength = 2048

// Store is an idempotency.Store on one PostgreSQL table through pgx v5 (pgxpool):
//
//	key        text PRIMARY KEY   -- the storage key (see Options.MaxKeyLength)
//	state      text NOT NULL      -- 'claimed' or 'confirmed'
//	owner      text               -- the claim's owner token; NULL once confirmed
//	expires_at timestamptz NOT NULL -- end of the lease or of the retention
//	updated_at timestamptz NOT NULL DEFAULT now() -- when the claim was taken (a renewal leaves it) or confirmed
//
// plus an index on expires_at for Purge. Migrate creates both.
//
// The server keeps time: every expiry is computed and compared with now()
// on the server, so clients with skewed clocks agree, and the Options clock
// is not used. A row whose expires_at has passed is free: the next claim
// takes it over in place, and Purge deletes it.
//
// Round trips: every operation is one SQL statement, so one round trip on a
// connection that has already prepared it (pgx's default statement cache
// prepares each statement once per connection, which costs one extra round
// trip the first time). The batch methods of idempotency.BatchStore
// (TryClaimBatch, ConfirmBatch, ReleaseBatch) are one statement each too,
// over arrays of keys, so a batch costs one round trip and at most one
// commit flush whatever its size. They are sent as unnamed statements
// (pgx's QueryExecModeCacheDescribe when the pool defaults to its
// statement cache) and so planned at every call, for the table as it is
// then: a prepared statement settles on one generic plan after five runs,
// and one made while the table was young scans the whole table at every
// batch once it has grown. Planning costs the server a fraction of a
// millisecond per batch.
//
// Cost: a claim and a confirm each commit a write, so a pair waits for two
// WAL flushes; on one connection that, not the SQL, bounds the rate (see
// the package benchmarks). Concurrent callers share flushes (group commit),
// so use a pool of several connections. A TryClaim that finds a live claim
// or a retained confirmation (a redelivery) is a plain read with no flush.
// Setting synchronous_commit=off for the store's connections (a URL
// parameter pgx passes to the server) removes the flush wait at the price
// that a server crash can forget the last fraction of a second of claims and
// confirmations: a forgotten confirmation lets a redelivery run the work
// again, so only do it where running twice is tolerable.
//
// A Store is safe for concurrent use. It owns its pool only when it was
// opened by URL (Open); a store made with New
// leaves the pool to its caller, and Close does not close it.
type Store struct {
	core     *claimsql.Store // confirm, release, is-confirmed, purge, close
	g        *claimkit.Guard
	pool     *pgxpool.Pool
	ownsPool bool
	o        idempotency.Options
	claimUS  int64
	retainUS int64

	table string // quoted, possibly schema-qualified
	index string // quoted, unqualified

	sqlClaim, sqlTryClaim, sqlConfirm, sqlRelease, sqlRenew, sqlIsConfirmed, sqlPurge, sqlBacklog string

	sqlTryClaimBatch, sqlConfirmBatch, sqlReleaseBatch string
	batchMode                                          pgx.QueryExecMode // see batchExecMode
}

// New returns a store on opts.Table in pool. New does no I/O: call
// Migrate once to create the table. The caller keeps ownership of pool:
// Close leaves it open. New starts the automatic purge of expired rows
// (Options.PurgeInterval, every hour by default; its first pass runs one
// interval after New, and fails, logged and counted, if Migrate has not
// created the table by then); Close stops it.
func New(ctx context.Context, pool *pgxpool.Pool, opts Options) (*Store, error) {
	p, err := newStore(ctx, pool, opts)
	if err != nil {
		return nil, err
	}
	p.startPurge()
	return p, nil
}

// newStore is New without starting the purge.
func newStore(ctx context.Context, pool *pgxpool.Pool, opts Options) (*Store, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if pool == nil {
		return nil, errors.New("idempotency: pgstore.New: nil pool")
	}
	o, err := claimkit.Normalize(opts.Options)
	if err != nil {
		return nil, err
	}
	table := cmp.Or(opts.Table, defaultTable)
	if o.MaxKeyLength > MaxKeyLength {
		return nil, fmt.Errorf("%w: MaxKeyLength %d above the PostgreSQL store's %d (a longer key would not fit its primary key index)", idempotency.ErrOptions, o.MaxKeyLength, MaxKeyLength)
	}
	m := postgresTableRE.FindStringSubmatch(table)
	if m == nil {
		return nil, fmt.Errorf("idempotency: invalid PostgreSQL table name %q (want [schema.]name of letters, digits and '_', name at most 48 bytes)", table)
	}
	if pgtable.TempSchema.MatchString(m[1]) {
		return nil, fmt.Errorf("idempotency: PostgreSQL table %q is in a temporary schema: every pooled connection would see a table of its own, and nothing would be deduplicated", table)
	}
	ident := pgx.Identifier{m[2]}
	if m[1] != "" {
		ident = pgx.Identifier{m[1], m[2]}
	}
	p := &Store{
		pool:     pool,
		o:        o,
		claimUS:  claimkit.Micros(o.ClaimTTL),
		retainUS: claimkit.Micros(o.Retention),
		g:        &claimkit.Guard{Name: "postgres", MaxKeyLength: o.MaxKeyLength, Explain: pgpooler.Explain},
		table:    ident.Sanitize(),
		index:    pgx.Identifier{m[2] + postgresIndexSuffix}.Sanitize(),
	}
	cc := pool.Config().ConnConfig
	p.batchMode = batchExecMode(cc.DefaultQueryExecMode, cc.DescriptionCacheCapacity)
	p.buildSQL()
	p.buildBatchSQL()
	p.core = claimsql.New(pgxdb.Pool(pool), p.g, claimsql.Dialect{Confirm: p.sqlConfirm, Release: p.sqlRelease,
		IsConfirmed: p.sqlIsConfirmed, Purge: p.sqlPurge, Resume: true, Pace: purgeloop.Server}, o)
	return p, nil
}

// startPurge starts the automatic purge (Options.PurgeInterval).
func (p *Store) startPurge() {
	p.core.StartPurge("idempotency: postgres " + p.table)
}

// buildSQL writes the statements once; only the table name is spliced in,
// and it is a validated, quoted identifier. Every other value is a
// parameter. A duration is in microseconds ($3, but $1 in sqlConfirm).
func (p *Store) buildSQL() {
	t := p.table
	// old is the key's row as this statement's snapshot sees it.
	//
	// ins takes the key when it is new or its row expired. It is not even
	// tried when the snapshot shows a live row: ON CONFLICT ... DO UPDATE
	// locks the conflicting row even when its WHERE then refuses the
	// update, and a row lock is a write (a transaction id, WAL, a commit
	// flush), so without the guard every redelivery of a claimed or
	// confirmed key would cost a disk flush; with it, those are plain reads.
	//
	// When tried, ON CONFLICT ... DO UPDATE ... WHERE locks the newest
	// committed row version and evaluates WHERE on it, so of two callers
	// racing for an expired (or new) key exactly one writes; the other's
	// upsert returns no row. No unique-violation error can abort a
	// surrounding transaction (the trap of insert-then-catch repositories).
	claimCTE := `WITH old AS (
  SELECT state, expires_at FROM ` + t + ` WHERE key = $1::text
), ins AS (
  INSERT INTO ` + t + ` AS tgt (key, state, owner, expires_at, updated_at)
  SELECT $1::text, 'claimed', $2::text, now() + $3::bigint * interval '1 microsecond', now()
  WHERE NOT EXISTS (SELECT 1 FROM old WHERE old.expires_at > now())
  ON CONFLICT (key) DO UPDATE
  SET state = 'claimed', owner = EXCLUDED.owner, expires_at = EXCLUDED.expires_at, updated_at = EXCLUDED.updated_at
  WHERE tgt.expires_at <= now()
  RETURNING tgt.expires_at
)
`
	p.sqlClaim = claimCTE + `SELECT expires_at FROM ins`

	// TryClaim: when ins wrote nothing, report old. Why every answer is
	// safe:
	//   - 'claimed' comes only from ins, which did write our claim.
	//   - 'confirmed' needs a confirmed row still retained at now(); nobody
	//     changes such a row before its retention ends (Purge and takeovers
	//     touch only expired rows), so the work is finished.
	//   - Everything else is 'in-progress': a live claim in the snapshot
	//     (released or confirmed since, maybe: then the caller retries), or
	//     an expired row or no row at all in the snapshot while ins found a
	//     live row anyway: a concurrent transaction inserted the key or took
	//     it over after our snapshot was taken, ins waited for it, found
	//     its live claim and did nothing, and old cannot see that newer
	//     row. In-progress costs the caller one retry, never a message.
	// If the statement returns no row at all (no row in the snapshot and
	// ins refused), TryClaim answers InProgress for the same reason.
	p.sqlTryClaim = claimCTE + `SELECT 'claimed', expires_at FROM ins
UNION ALL
SELECT CASE WHEN state = 'confirmed' AND expires_at > now() THEN 'confirmed' ELSE 'in-progress' END, expires_at
FROM old
WHERE NOT EXISTS (SELECT 1 FROM ins)`

	p.sqlConfirm = `UPDATE ` + t + `
SET state = 'confirmed', owner = NULL, expires_at = now() + $1::bigint * interval '1 microsecond', updated_at = now()
WHERE key = $2 AND owner = $3 AND state = 'claimed' AND expires_at > now()`

	p.sqlRelease = `DELETE FROM ` + t + `
WHERE key = $1 AND owner = $2 AND state = 'claimed' AND expires_at > now()`

	// A renewal leaves updated_at: it stays the time the claim was
	// taken, which Backlog reads as the claim's age.
	p.sqlRenew = `UPDATE ` + t + `
SET expires_at = now() + $3::bigint * interval '1 microsecond'
WHERE key = $1 AND owner = $2 AND state = 'claimed' AND expires_at > now()
RETURNING expires_at`

	p.sqlIsConfirmed = `SELECT EXISTS (SELECT 1 FROM ` + t + `
WHERE key = $1 AND state = 'confirmed' AND expires_at > now())`

	// Backlog: $1 the table's name as the statements write it, $2 the
	// claim TTL in microseconds, $3 backlogHeldCap, $4 backlogFirstRows.
	// h walks the expires_at index over the rows expiring within one claim
	// TTL and keeps the live claims; f reads the rows that expire first.
	// Rows is the planner's estimate, or a count capped at
	// backlogCountCap while the table was never analyzed (reltuples -1)
	// or analyzed empty (0). Ages are microseconds of the server's clock.
	p.sqlBacklog = `WITH h AS (
  SELECT updated_at FROM ` + t + `
  WHERE expires_at > now() AND expires_at <= now() + $2::bigint * interval '1 microsecond' AND state = 'claimed'
  LIMIT $3
), f AS (
  SELECT updated_at FROM ` + t + ` ORDER BY expires_at LIMIT $4
)
SELECT (SELECT count(*) FROM h),
  COALESCE((SELECT (extract(epoch FROM now() - min(updated_at)) * 1000000)::bigint FROM h), 0),
  COALESCE((SELECT (extract(epoch FROM now() - min(u)) * 1000000)::bigint FROM (SELECT updated_at AS u FROM h UNION ALL SELECT updated_at FROM f) a), 0),
  (SELECT CASE WHEN c.reltuples > 0 THEN c.reltuples::bigint
     ELSE (SELECT count(*) FROM (SELECT 1 FROM ` + t + ` LIMIT ` + strconv.Itoa(backlogCountCap) + `) n) END
   FROM pg_class c WHERE c.oid = $1::regclass)`

	// Purge: one bounded batch. The subquery walks the expires_at index
	// oldest first and locks at most $1 expired rows, skipping rows another
	// transaction holds (a takeover in progress, a concurrent purge), so
	// purges never wait on or deadlock with claimers or each other. Locked
	// rows are re-checked against the WHERE clause in their newest version,
	// so a row taken over meanwhile is not deleted; the outer expires_at
	// test says the same once more. $2 is where the batch starts: the
	// newest expires_at the previous batch deleted. Starting the index
	// scan there skips the entries of the rows earlier batches deleted,
	// which stay in the index until VACUUM; from the oldest entry every
	// batch would walk past all of them, and a purge of millions of rows
	// would slow down batch after batch. It returns the rows deleted and
	// the newest expires_at among them.
	p.sqlPurge = `WITH d AS (
  DELETE FROM ` + t + `
  WHERE key IN (
    SELECT key FROM ` + t + `
    WHERE expires_at >= $2 AND expires_at <= now()
    ORDER BY expires_at
    LIMIT $1
    FOR UPDATE SKIP LOCKED
  ) AND expires_at <= now()
  RETURNING expires_at
)
SELECT count(*), max(expires_at) FROM d`
}

// Backlog samples the store (see idempotency.Backlog) in one statement,
// with the server's clock, planned at every call like the batch
// statements. Held and OldestHeld come from the expires_at
// index: the claims among the rows expiring within one ClaimTTL (a live
// claim expires within it; a claim taken with a longer ClaimTTL by
// another process is missed until then), counted up to 10,000. That
// range also holds the confirmations about to be forgotten, one
// ClaimTTL's worth of traffic from Retention ago, which the statement
// reads and skips: its cost follows the traffic, not the table's size.
// OldestHeld is the age of the oldest claim since it was taken (a renewal
// does not make it younger; a claim renewed by a version of this package
// that set updated_at looks as old as its last renewal). OldestRow is the
// oldest among the live claims and the 1,000 rows that expire first (the
// oldest confirmation, or an expired row not yet purged). Rows is the
// planner's estimate (pg_class.reltuples, as of the last VACUUM or
// ANALYZE, which autovacuum runs); while the table has never been
// analyzed, or was analyzed empty, it is an exact count capped at 10,000
// rows.
func (p *Store) Backlog(ctx context.Context) (idempotency.Backlog, error) {
	if err := p.g.Begin(ctx); err != nil {
		return idempotency.Backlog{}, err
	}
	var held, oldestHeld, oldestRow int64
	var rows *int64
	err := p.pool.QueryRow(ctx, p.sqlBacklog, p.batchMode, p.table, p.claimUS, backlogHeldCap, backlogFirstRows).
		Scan(&held, &oldestHeld, &oldestRow, &rows)
	if err != nil {
		return idempotency.Backlog{}, p.g.Error(ctx, "backlog", err)
	}
	b := idempotency.Backlog{Held: held, OldestRow: max(time.Duration(oldestRow)*time.Microsecond, 0)}
	if held > 0 {
		b.OldestHeld = max(time.Duration(oldestHeld)*time.Microsecond, 0)
	}
	if rows != nil {
		b.Rows = *rows
	}
	return b, nil
}

// backlogHeldCap bounds the claims Backlog counts, backlogFirstRows the
// rows it reads at the head of the expires_at index, and backlogCountCap
// the rows it counts on a table never analyzed.
const (
	backlogHeldCap   = 10000
	backlogFirstRows = 1000
	backlogCountCap  = 10000
)

// Migrate creates the table and its expires_at index if they do not exist.
// It is idempotent and safe to run from several processes at once: it runs
// in one transaction under a transaction-scoped advisory lock, because two
// concurrent CREATE TABLE IF NOT EXISTS can otherwise both try to create the
// table and one fails. It then checks the table its name resolved to on
// that connection and refuses a temporary one (an unqualified name under a
// search_path that starts with pg_temp, which URL options can set) and an
// unlogged one (emptied by crash recovery, absent on standbys): both lose
// recorded keys, and a redelivery would be applied again.
func (p *Store) Migrate(ctx context.Context) error {
	if err := p.g.Begin(ctx); err != nil {
		return err
	}
	if err := p.migrate(ctx); err != nil {
		return p.g.Error(ctx, "migrate", err)
	}
	return nil
}

// migrate is Migrate without the checks and the wrapping.
func (p *Store) migrate(ctx context.Context) error {
	return pgx.BeginFunc(ctx, p.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtext('msgaudit idempotency migrate'))`); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `CREATE TABLE IF NOT EXISTS `+p.table+` (
  key        text PRIMARY KEY,
  state      text NOT NULL CHECK (state IN ('claimed', 'confirmed')),
  owner      text,
  expires_at timestamptz NOT NULL,
  updated_at timestamptz NOT NULL DEFAULT now()
)`); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `CREATE INDEX IF NOT EXISTS `+p.index+` ON `+p.table+` (expires_at)`); err != nil {
			return err
		}
		// Where the name resolved, on the connection that created it: an
		// unqualified name under a search_path that starts with pg_temp
		// makes a temporary table.
		var schema, persistence string
		err := tx.QueryRow(ctx, pgtable.Query, p.table).Scan(&schema, &persistence)
		if err != nil && !errors.Is(err, pgx.ErrNoRows) {
			return err
		}
		return pgtable.Check(p.table, err == nil, schema, persistence)
	})
}

// Open connects to the PostgreSQL server named by rawURL, runs
// Migrate and returns a store that owns its pool (Close closes it).
//
// rawURL is a pgx connection URL (postgres:// or postgresql://). pgx's own
// parsing handles everything else in it: user and password, several hosts,
// sslmode (disable, prefer, require, verify-ca, verify-full), sslrootcert,
// sslcert, sslkey, sslpassword, connect_timeout, pool_max_conns and the
// other pgxpool settings, and PG* environment variables for what the URL
// leaves out. The query parameter msgaudit_table names the table, as
// Options.Table does, and is removed before pgx sees the URL. For a TLS
// configuration a URL cannot express, build the pool with pgxpool.ParseConfig
// and NewWithConfig and call New.
//
// TLS: without sslmode (and without PGSSLMODE), pgx uses prefer: TLS that
// does not verify the server, falling back to plaintext without a word;
// require does not verify the server either. Use sslmode=verify-full (with
// sslrootcert naming the CA, or sslrootcert=system) wherever the network
// is not trusted. The effective mode is logged once to
// Options.Logger, as a warning unless it is verify-full or verify-ca.
//
// Behind a pooler in transaction mode (PgBouncer without
// max_prepared_statements), add default_query_exec_mode=exec to the URL:
// pgx's default statement cache names statements per client connection,
// which such a pooler breaks (the calls then fail with an error that says
// so).
//
// Errors name the URL with its password redacted; the password never
// appears in them.
func Open(ctx context.Context, rawURL string, opts Options) (*Store, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	o := opts.Options
	red := redact.URL(rawURL)
	if strings.Contains(rawURL, "://") {
		if _, err := redact.ParseURL(rawURL); err != nil {
			return nil, fmt.Errorf("idempotency: postgres: %w", err)
		}
	}
	clean, table, found, err := storeconn.CutQueryParam(rawURL, postgresTableParam)
	if err != nil {
		return nil, storeconn.RedactError(fmt.Errorf("idempotency: postgres URL %s: %w", red, err), rawURL)
	}
	switch {
	case found && table == "":
		return nil, fmt.Errorf("%w: postgres URL %s: empty %s", idempotency.ErrOptions, red, postgresTableParam)
	case !found:
		table = opts.Table
	case opts.Table != "" && table != opts.Table:
		return nil, fmt.Errorf("%w: postgres URL %s: %s=%q, but Options.Table is %q", idempotency.ErrOptions, red, postgresTableParam, table, opts.Table)
	}
	// pgx recognises only lowercase schemes; anything else it would parse
	// as a keyword=value string.
	if scheme, rest, ok := strings.Cut(clean, "://"); ok && scheme != strings.ToLower(scheme) {
		clean = strings.ToLower(scheme) + "://" + rest
	}
	cfg, err := pgxpool.ParseConfig(clean)
	if err != nil {
		return nil, storeconn.RedactError(fmt.Errorf("idempotency: postgres URL %s: %w", red, pgParseError(err)), rawURL)
	}
	logPostgresTLS(ctx, o.Logger, &cfg.ConnConfig.Config, red)
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, storeconn.RedactError(fmt.Errorf("idempotency: postgres %s: %w", red, err), rawURL)
	}
	p, err := newStore(ctx, pool, Options{Options: o, Table: table})
	if err != nil {
		pool.Close()
		return nil, err
	}
	p.ownsPool = true
	if err := p.migrate(ctx); err != nil {
		pool.Close()
		err = claimkit.CtxCause(ctx, pgpooler.Explain(err))
		return nil, storeconn.RedactError(fmt.Errorf("idempotency: postgres %s: migrate: %w", red, err), rawURL)
	}
	p.startPurge()
	return p, nil
}

// pgParseError keeps what pgx's parse error says is wrong and drops the
// connection string it quotes: pgx masks passwords there by patterns that
// miss some (a quoted password holding an escaped quote), so only the text
// after the quoted string is kept (and then redacted by the caller). The
// error still wraps err.
func pgParseError(err error) error {
	var pe *pgconn.ParseConfigError
	if !errors.As(err, &pe) {
		return storeconn.UnwrapURLError(err)
	}
	msg := pe.Error()
	reason := "cannot parse"
	if i := strings.LastIndex(msg, "`: "); i >= 0 {
		reason = msg[i+len("`: "):]
	}
	return &reasonError{reason: reason, err: err}
}

// reasonError prints reason and wraps err.
type reasonError struct {
	reason string
	err    error
}

func (e *reasonError) Error() string { return e.reason }

// Unwrap returns the cause of the wrapped parse error, not the parse error
// itself, whose message quotes the connection string.
func (e *reasonError) Unwrap() error { return errors.Unwrap(e.err) }

// openPostgresURL is Open's entry for postgres:// and postgresql:// URLs.
func openPostgresURL(ctx context.Context, rawURL string, o idempotency.Options) (idempotency.Store, error) {
	p, err := Open(ctx, rawURL, Options{Options: o})
	if err != nil {
		return nil, err
	}
	return p, nil
}

// claim takes the key with one upsert (the atomic two-state claim): inserted when new, taken over in
// place when the old claim or confirmation expired. ok is false when the
// key holds a live claim or a retained confirmation.
func (p *Store) claim(ctx context.Context, key idempotency.Key) (idempotency.Claim, bool, error) {
	if err := p.g.Begin(ctx); err != nil {
		return idempotency.Claim{}, false, err
	}
	sk, err := p.g.StorageKey(key)
	if err != nil {
		return idempotency.Claim{}, false, err
	}
	token := claimkit.NewToken()
	var expires time.Time
	err = p.pool.QueryRow(ctx, p.sqlClaim, sk, token, p.claimUS).Scan(&expires)
	if errors.Is(err, pgx.ErrNoRows) {
		return idempotency.Claim{}, false, nil
	}
	if err != nil {
		return idempotency.Claim{}, false, p.g.Error(ctx, "claim", err)
	}
	return idempotency.Claim{Key: key, Token: token, Expires: expires}, true, nil
}

// TryClaim claims key, or tells a confirmed key from a claimed one, in one
// statement (see the comment on the SQL in buildSQL for why each answer is
// safe under concurrency).
func (p *Store) TryClaim(ctx context.Context, key idempotency.Key) (idempotency.Outcome, idempotency.Claim, error) {
	if err := p.g.Begin(ctx); err != nil {
		return 0, idempotency.Claim{}, err
	}
	sk, err := p.g.StorageKey(key)
	if err != nil {
		return 0, idempotency.Claim{}, err
	}
	token := claimkit.NewToken()
	out, expires, err := p.tryClaim(ctx, sk, token)
	if err != nil || out != idempotency.Claimed {
		return out, idempotency.Claim{}, err
	}
	return idempotency.Claimed, idempotency.Claim{Key: key, Token: token, Expires: expires}, nil
}

// tryClaim runs sqlTryClaim for storage key sk with token: the outcome,
// and the claim's expiry when Claimed.
func (p *Store) tryClaim(ctx context.Context, sk, token string) (idempotency.Outcome, time.Time, error) {
	var (
		outcome string
		expires *time.Time
	)
	err := p.pool.QueryRow(ctx, p.sqlTryClaim, sk, token, p.claimUS).Scan(&outcome, &expires)
	if errors.Is(err, pgx.ErrNoRows) {
		// The upsert found a row committed after this statement's
		// snapshot: someone else's live claim.
		return idempotency.InProgress, time.Time{}, nil
	}
	if err != nil {
		return 0, time.Time{}, p.g.Error(ctx, "try-claim", err)
	}
	switch outcome {
	case "claimed":
		if expires == nil {
			return 0, time.Time{}, errors.New("idempotency: postgres try-claim: claimed without expiry")
		}
		return idempotency.Claimed, *expires, nil
	case "confirmed":
		return idempotency.AlreadyConfirmed, time.Time{}, nil
	case "in-progress":
		return idempotency.InProgress, time.Time{}, nil
	}
	return 0, time.Time{}, fmt.Errorf("idempotency: postgres try-claim: unexpected outcome %q", outcome)
}

// Confirm turns the caller's live claim into a confirmation retained for the
// retention period. ErrClaimLost when the row no longer holds the caller's
// live claim; nothing is changed then.
func (p *Store) Confirm(ctx context.Context, c idempotency.Claim) error {
	return p.core.Confirm(ctx, c)
}

// Release deletes the caller's live claim. ErrClaimLost when the row no
// longer holds it (expired, taken over, released or confirmed).
func (p *Store) Release(ctx context.Context, c idempotency.Claim) error {
	return p.core.Release(ctx, c)
}

// Renew extends the caller's live claim to a full claim TTL from the
// server's now. ErrClaimLost when the row no longer holds it.
func (p *Store) Renew(ctx context.Context, c idempotency.Claim) (idempotency.Claim, error) {
	sk, err := p.g.Owner(ctx, c)
	if err != nil {
		return idempotency.Claim{}, err
	}
	var expires time.Time
	err = p.pool.QueryRow(ctx, p.sqlRenew, sk, c.Token, p.claimUS).Scan(&expires)
	if errors.Is(err, pgx.ErrNoRows) {
		return idempotency.Claim{}, idempotency.ErrClaimLost
	}
	if err != nil {
		return idempotency.Claim{}, p.g.Error(ctx, "renew", err)
	}
	c.Expires = expires
	return c, nil
}

// IsConfirmed reports whether key holds a confirmation still retained at the
// server's now.
func (p *Store) IsConfirmed(ctx context.Context, key idempotency.Key) (bool, error) {
	return p.core.IsConfirmed(ctx, key)
}

// Purge deletes expired rows (lapsed claims and confirmations past their
// retention) and returns how many. It works in batches of at most batch rows
// (batch <= 0 means Options.PurgeBatch), each its own short statement and
// transaction that walks the expires_at index and skips locked rows, and
// stops after the first short batch. Big tables are where cleanup hurts
// (NServiceBus's SQL outbox cleanup deadlocks and times out on tens of
// millions of rows): a bounded, index-driven, SKIP LOCKED delete holds few
// locks for a short time and never waits on a claimer. Rows skipped because
// another transaction held them are left for the next Purge.
//
// On an error or a cancelled ctx, Purge returns the rows deleted so far with
// the error; the batches already done stay done.
func (p *Store) Purge(ctx context.Context, batch int) (n int64, err error) {
	return p.core.Purge(ctx, batch)
}

// PurgeStats returns the counters of the store's purges, the automatic
// ones and the calls of Purge.
func (p *Store) PurgeStats() idempotency.PurgeStats { return p.core.PurgeStats() }

// Close marks the store closed (later calls return ErrClosed), stops the
// automatic purge (waiting for a purge in progress to stop at its next
// statement) and closes the pool if the store created it (Open).
func (p *Store) Close() error {
	return p.core.Close(func() error {
		if p.ownsPool {
			p.pool.Close()
		}
		return nil
	})
}
