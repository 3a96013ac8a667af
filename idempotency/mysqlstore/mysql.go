package mysqlstore

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/acemq/msgaudit/idempotency"
	"github.com/acemq/msgaudit/internal/claimkit"
	"github.com/acemq/msgaudit/internal/claimsql"
	"github.com/acemq/msgaudit/internal/mysqlurl"
	"github.com/acemq/msgaudit/internal/purgeloop"
	"github.com/acemq/msgaudit/internal/redact"
	"github.com/acemq/msgaudit/internal/sqldb"
	"github.com/acemq/msgaudit/internal/storeconn"
)

// defaultTable is the table's name when Options.Table is "".
const defaultTable = "msgaudit_idempotency"

// tableParam is the URL query parameter that names the table.
const tableParam = "msgaudit_table"

// MaxKeyLength is the longest Options.MaxKeyLength the store accepts, in
// bytes: the key column is a VARBINARY(1024) primary key. Longer keys are
// stored hashed.
const MaxKeyLength = 1024

// tableRE accepts [schema.]name of plain identifiers, the name at most 48
// bytes so that it and "_expires_at_idx" fit MySQL's 64.
var tableRE = regexp.MustCompile(`^(?:([A-Za-z_][A-Za-z0-9_]{0,63})\.)?([A-Za-z_][A-Za-z0-9_]{0,47})$`)

// nowUS is the server's time in microseconds since the Unix epoch, the
// same whatever the session's time zone. NOW(6) is fixed for a statement.
const nowUS = `CAST(UNIX_TIMESTAMP(NOW(6)) * 1000000 AS SIGNED)`

// Options configure a Store.
type Options struct {
	idempotency.Options
	// Table is the store's table, [schema.]name of letters, digits and
	// '_'; "" means "msgaudit_idempotency".
	Table string
}

// Store is an idempotency.Store on a MySQL or MariaDB table.
type Store struct {
	core     *claimsql.Store // confirm, release, is-confirmed, purge, close
	g        *claimkit.Guard
	db       *sql.DB
	ownsDB   bool
	o        idempotency.Options
	claimUS  int64
	retainUS int64
	schema   string // "" when unqualified
	name     string

	sqlCreate, sqlEngine, sqlClaim, sqlState, sqlConfirm, sqlRelease, sqlRenew, sqlHeld, sqlIsConfirmed, sqlPurge, sqlBacklog string
}

// New returns a store on db's table. It checks the options and the table
// name but touches no data: run Migrate once to create the table (Open
// does). db stays the caller's. New starts the automatic purge of expired
// rows (Options.PurgeInterval, every hour by default; its first pass runs
// one interval after New); Close stops it.
func New(ctx context.Context, db *sql.DB, opts Options) (*Store, error) {
	s, err := newStore(ctx, db, opts)
	if err != nil {
		return nil, err
	}
	s.startPurge()
	return s, nil
}

// newStore is New without starting the purge.
func newStore(ctx context.Context, db *sql.DB, opts Options) (*Store, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if db == nil {
		return nil, errors.New("idempotency: mysqlstore.New: nil *sql.DB")
	}
	o, err := claimkit.Normalize(opts.Options)
	if err != nil {
		return nil, err
	}
	if o.MaxKeyLength > MaxKeyLength {
		return nil, fmt.Errorf("%w: MaxKeyLength %d above the MySQL store's %d bytes (its key column)", idempotency.ErrOptions, o.MaxKeyLength, MaxKeyLength)
	}
	table := cmp.Or(opts.Table, defaultTable)
	m := tableRE.FindStringSubmatch(table)
	if m == nil {
		return nil, fmt.Errorf("%w: invalid MySQL table name %q (want [schema.]name of letters, digits and '_', the name at most 48 bytes)", idempotency.ErrOptions, table)
	}
	s := &Store{db: db, o: o, claimUS: claimkit.Micros(o.ClaimTTL), retainUS: claimkit.Micros(o.Retention), schema: m[1], name: m[2],
		g: &claimkit.Guard{Name: "mysql", MaxKeyLength: o.MaxKeyLength}}
	s.buildSQL()
	s.core = claimsql.New(sqldb.Std(db), s.g, claimsql.Dialect{Confirm: s.sqlConfirm, Release: s.sqlRelease,
		IsConfirmed: s.sqlIsConfirmed, Purge: s.sqlPurge, Pace: purgeloop.Server}, o)
	return s, nil
}

// startPurge starts the automatic purge (Options.PurgeInterval).
func (s *Store) startPurge() {
	s.core.StartPurge("idempotency: mysql " + s.name)
}

// buildSQL writes the statements; only the validated, quoted table name
// is spliced in.
func (s *Store) buildSQL() {
	q := func(id string) string { return "`" + id + "`" }
	t := q(s.name)
	if s.schema != "" {
		t = q(s.schema) + "." + t
	}
	s.sqlCreate = `CREATE TABLE IF NOT EXISTS ` + t + ` (
  ` + "`key`" + `     VARBINARY(1024) NOT NULL PRIMARY KEY,
  state      VARCHAR(9)      NOT NULL,
  owner      VARBINARY(64)   NULL,
  expires_at BIGINT          NOT NULL,
  INDEX ` + q(s.name+"_expires_at_idx") + ` (expires_at)
) ENGINE=InnoDB`
	s.sqlEngine = `SELECT ENGINE FROM information_schema.TABLES WHERE TABLE_SCHEMA = COALESCE(NULLIF(?, ''), DATABASE()) AND TABLE_NAME = ?`
	// The claim: a new key is inserted; an existing row is taken over
	// only when it expired. ON DUPLICATE KEY UPDATE assigns left to
	// right, each later expression seeing the earlier ones' new values,
	// so expires_at, which the conditions read, is assigned last. The row
	// lock makes two racing claims of one key take turns: the second sees
	// the first's live claim and changes nothing. Whether the claim is
	// ours is read back by owner (sqlState), not from the affected-row
	// count, which a connection with clientFoundRows reports differently.
	s.sqlClaim = `INSERT INTO ` + t + ` (` + "`key`" + `, state, owner, expires_at) VALUES (?, 'claimed', ?, ` + nowUS + ` + ?)
ON DUPLICATE KEY UPDATE
  owner = IF(expires_at <= ` + nowUS + `, VALUES(owner), owner),
  state = IF(expires_at <= ` + nowUS + `, 'claimed', state),
  expires_at = IF(expires_at <= ` + nowUS + `, VALUES(expires_at), expires_at)`
	s.sqlState = `SELECT state, COALESCE(owner, ''), expires_at > ` + nowUS + ` FROM ` + t + ` WHERE ` + "`key`" + ` = ?`
	held := "`key`" + ` = ? AND owner = ? AND state = 'claimed' AND expires_at > ` + nowUS
	s.sqlConfirm = `UPDATE ` + t + ` SET state = 'confirmed', owner = NULL, expires_at = ` + nowUS + ` + ? WHERE ` + held
	s.sqlRelease = `DELETE FROM ` + t + ` WHERE ` + held
	s.sqlRenew = `UPDATE ` + t + ` SET expires_at = ` + nowUS + ` + ? WHERE ` + held
	s.sqlHeld = `SELECT EXISTS (SELECT 1 FROM ` + t + ` WHERE ` + held + `)`
	s.sqlIsConfirmed = `SELECT EXISTS (SELECT 1 FROM ` + t + ` WHERE ` + "`key`" + ` = ? AND state = 'confirmed' AND expires_at > ` + nowUS + `)`
	// Backlog: h walks the expires_at index over the rows expiring within
	// one claim TTL and keeps the live claims; f reads the rows that
	// expire first. A row's age is derived from its expiry: a claim's
	// lease or a confirmation's retention before it. Parameters: the
	// schema and name, the claim TTL twice, the retention and the claim
	// TTL, in microseconds. The index is forced: on a table of some
	// 100,000 rows MariaDB would rather read it all and sort it than
	// look up the first 1,000 rows through the index.
	idx := ` FORCE INDEX (` + q(s.name+"_expires_at_idx") + `)`
	s.sqlBacklog = `SELECT h.n, h.m, f.m, (SELECT TABLE_ROWS FROM information_schema.TABLES WHERE TABLE_SCHEMA = COALESCE(NULLIF(?, ''), DATABASE()) AND TABLE_NAME = ?)
FROM (SELECT count(*) AS n, ` + nowUS + ` - MIN(expires_at) + ? AS m FROM (
  SELECT expires_at FROM ` + t + idx + ` WHERE expires_at > ` + nowUS + ` AND expires_at <= ` + nowUS + ` + ? AND state = 'claimed' LIMIT ` + strconv.Itoa(backlogHeldCap) + `) x) AS h,
(SELECT ` + nowUS + ` - MIN(expires_at - IF(state = 'confirmed', ?, ?)) AS m FROM (
  SELECT state, expires_at FROM ` + t + idx + ` ORDER BY expires_at LIMIT ` + strconv.Itoa(backlogFirstRows) + `) y) AS f`
	// One bounded batch, oldest first through the expires_at index.
	s.sqlPurge = `DELETE FROM ` + t + ` WHERE expires_at <= ` + nowUS + ` ORDER BY expires_at LIMIT ?`
}

// Migrate creates the table and its expires_at index if they do not
// exist, and refuses a table that is not InnoDB: without transactions and
// row locks, two racing claims of a key could both win.
func (s *Store) Migrate(ctx context.Context) error {
	if err := s.g.Begin(ctx); err != nil {
		return err
	}
	if err := s.migrate(ctx); err != nil {
		return s.g.Error(ctx, "migrate", err)
	}
	return nil
}

func (s *Store) migrate(ctx context.Context) error {
	if _, err := s.db.ExecContext(ctx, s.sqlCreate); err != nil {
		return err
	}
	var engine string
	if err := s.db.QueryRowContext(ctx, s.sqlEngine, s.schema, s.name).Scan(&engine); err != nil {
		return fmt.Errorf("reading the table's engine: %w", err)
	}
	if !strings.EqualFold(engine, "InnoDB") {
		return fmt.Errorf("%w: table %s uses the %s engine, which has no transactions or row locks; two claims of a key could both win: ALTER TABLE ... ENGINE=InnoDB", idempotency.ErrOptions, s.name, engine)
	}
	return nil
}

// Open connects to the server named by rawURL, runs Migrate and returns a
// store that owns its connections (Close closes them).
//
// rawURL is mysql://[user[:password]@]host[:port]/database[?params]: the
// params are go-sql-driver/mysql's DSN parameters (tls, timeout,
// readTimeout, ...), except msgaudit_table, which names the table as
// Options.Table does. Use tls=true (or a registered TLS configuration)
// wherever the network is not trusted. Errors never show the password.
func Open(ctx context.Context, rawURL string, opts Options) (*Store, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	red := redact.URL(rawURL)
	if _, err := redact.ParseURL(rawURL); err != nil {
		return nil, fmt.Errorf("idempotency: mysql: %w", err)
	}
	clean, table, found, err := storeconn.CutQueryParam(rawURL, tableParam)
	if err != nil {
		return nil, storeconn.RedactError(fmt.Errorf("idempotency: mysql URL %s: %w", red, err), rawURL)
	}
	switch {
	case found && table == "":
		return nil, fmt.Errorf("%w: mysql URL %s: empty %s", idempotency.ErrOptions, red, tableParam)
	case !found:
		table = opts.Table
	case opts.Table != "" && table != opts.Table:
		return nil, fmt.Errorf("%w: mysql URL %s: %s=%q, but Options.Table is %q", idempotency.ErrOptions, red, tableParam, table, opts.Table)
	}
	cfg, err := mysqlurl.Config(clean)
	if err != nil {
		return nil, storeconn.RedactError(fmt.Errorf("idempotency: mysql URL %s: %w", red, err), rawURL)
	}
	conn, err := mysql.NewConnector(cfg)
	if err != nil {
		return nil, storeconn.RedactError(fmt.Errorf("idempotency: mysql URL %s: %w", red, err), rawURL)
	}
	db := sql.OpenDB(conn)
	st, err := newStore(ctx, db, Options{Options: opts.Options, Table: table})
	if err != nil {
		db.Close()
		return nil, err
	}
	st.ownsDB = true
	if err := st.migrate(ctx); err != nil {
		db.Close()
		err = claimkit.CtxCause(ctx, err)
		return nil, storeconn.RedactError(fmt.Errorf("idempotency: mysql %s: migrate: %w", red, err), rawURL)
	}
	st.startPurge()
	return st, nil
}

// openURL is Open's entry for mysql:// URLs.
func openURL(ctx context.Context, rawURL string, o idempotency.Options) (idempotency.Store, error) {
	s, err := Open(ctx, rawURL, Options{Options: o})
	if err != nil {
		return nil, err
	}
	return s, nil
}

// TryClaim implements idempotency.Store.
func (s *Store) TryClaim(ctx context.Context, key idempotency.Key) (idempotency.Outcome, idempotency.Claim, error) {
	if err := s.g.Begin(ctx); err != nil {
		return 0, idempotency.Claim{}, err
	}
	sk, err := s.g.StorageKey(key)
	if err != nil {
		return 0, idempotency.Claim{}, err
	}
	token := claimkit.NewToken()
	// Dated from before the call, so the claim never promises more lease
	// than the server gave.
	start := time.Now()
	if _, err := s.db.ExecContext(ctx, s.sqlClaim, sk, token, s.claimUS); err != nil {
		return 0, idempotency.Claim{}, s.g.Error(ctx, "try-claim", err)
	}
	var (
		state, owner string
		live         bool
	)
	err = s.db.QueryRowContext(ctx, s.sqlState, sk).Scan(&state, &owner, &live)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		// Purged or released between the two statements: not ours.
		return idempotency.InProgress, idempotency.Claim{}, nil
	case err != nil:
		return 0, idempotency.Claim{}, s.g.Error(ctx, "try-claim", err)
	case owner == token && state == "claimed":
		return idempotency.Claimed, idempotency.Claim{Key: key, Token: token, Expires: start.Add(s.o.ClaimTTL)}, nil
	case state == "confirmed" && live:
		return idempotency.AlreadyConfirmed, idempotency.Claim{}, nil
	}
	return idempotency.InProgress, idempotency.Claim{}, nil
}

// Renew implements idempotency.Store: the claim's lease runs a full claim
// TTL from the server's now; ErrClaimLost when the row no longer holds it.
func (s *Store) Renew(ctx context.Context, c idempotency.Claim) (idempotency.Claim, error) {
	sk, err := s.g.Owner(ctx, c)
	if err != nil {
		return idempotency.Claim{}, err
	}
	start := time.Now()
	res, err := s.db.ExecContext(ctx, s.sqlRenew, s.claimUS, sk, c.Token)
	if err != nil {
		return idempotency.Claim{}, s.g.Error(ctx, "renew", err)
	}
	if n, err := res.RowsAffected(); err != nil || n != 1 {
		// An UPDATE that writes the value the row holds (a renewal in the
		// claim's own microsecond) changes no row: ask whether the claim
		// is still held.
		var held bool
		if err := s.db.QueryRowContext(ctx, s.sqlHeld, sk, c.Token).Scan(&held); err != nil {
			return idempotency.Claim{}, s.g.Error(ctx, "renew", err)
		}
		if !held {
			return idempotency.Claim{}, idempotency.ErrClaimLost
		}
	}
	c.Expires = start.Add(s.o.ClaimTTL)
	return c, nil
}

// Confirm implements idempotency.Store: ErrClaimLost when the row no
// longer holds the caller's live claim.
func (s *Store) Confirm(ctx context.Context, c idempotency.Claim) error {
	return s.core.Confirm(ctx, c)
}

// Release implements idempotency.Store: it deletes the caller's live
// claim; ErrClaimLost when the row no longer holds it.
func (s *Store) Release(ctx context.Context, c idempotency.Claim) error {
	return s.core.Release(ctx, c)
}

// IsConfirmed implements idempotency.Store.
func (s *Store) IsConfirmed(ctx context.Context, key idempotency.Key) (bool, error) {
	return s.core.IsConfirmed(ctx, key)
}

// Purge deletes expired rows (lapsed claims and confirmations past their
// retention) in batches of at most batch rows (batch <= 0 means
// Options.PurgeBatch), oldest first through the expires_at index, each its
// own short statement; it stops after the first short batch and returns
// how many rows it deleted.
func (s *Store) Purge(ctx context.Context, batch int) (n int64, err error) {
	return s.core.Purge(ctx, batch)
}

// PurgeStats returns the counters of the store's purges, the automatic
// ones and the calls of Purge.
func (s *Store) PurgeStats() idempotency.PurgeStats { return s.core.PurgeStats() }

// Close marks the store closed (later calls return ErrClosed), stops the
// automatic purge (waiting for a purge in progress to stop at its next
// statement) and closes the connections if the store opened them (Open).
func (s *Store) Close() error {
	return s.core.Close(func() error {
		if s.ownsDB {
			return s.db.Close()
		}
		return nil
	})
}

// Backlog samples the store (see idempotency.Backlog) in one statement,
// with the server's clock. Held and OldestHeld come from the expires_at
// index: the claims among the rows expiring within one ClaimTTL (a live
// claim expires within it; a claim taken with a longer ClaimTTL by
// another process is missed until then), counted up to 10,000. That
// range also holds the confirmations about to be forgotten, one
// ClaimTTL's worth of traffic from Retention ago, which the statement
// reads and skips: its cost follows the traffic, not the table's size.
// The table keeps no time a row was written, so ages are derived from
// expiries: OldestHeld is the time since the oldest claim was taken or
// last renewed, and OldestRow, the oldest among the live claims and the
// 1,000 rows that expire first, assumes every process uses this store's
// ClaimTTL and Retention. Rows is information_schema.TABLES.TABLE_ROWS:
// InnoDB's estimate, which MySQL 8 caches for
// information_schema_stats_expiry (a day by default; MariaDB reads it
// afresh).
func (s *Store) Backlog(ctx context.Context) (idempotency.Backlog, error) {
	if err := s.g.Begin(ctx); err != nil {
		return idempotency.Backlog{}, err
	}
	var held int64
	var oldestHeld, oldestFirst, rows sql.NullInt64
	err := s.db.QueryRowContext(ctx, s.sqlBacklog, s.schema, s.name, s.claimUS, s.claimUS, s.retainUS, s.claimUS).
		Scan(&held, &oldestHeld, &oldestFirst, &rows)
	if err != nil {
		return idempotency.Backlog{}, s.g.Error(ctx, "backlog", err)
	}
	us := func(v sql.NullInt64) time.Duration { return max(time.Duration(v.Int64)*time.Microsecond, 0) }
	b := idempotency.Backlog{Held: held, Rows: rows.Int64, OldestRow: us(oldestFirst)}
	if held > 0 {
		b.OldestHeld = us(oldestHeld)
		b.OldestRow = max(b.OldestRow, b.OldestHeld)
	}
	return b, nil
}

// backlogHeldCap bounds the claims Backlog counts and backlogFirstRows
// the rows it reads at the head of the expires_at index.
const (
	backlogHeldCap   = 10000
	backlogFirstRows = 1000
)
