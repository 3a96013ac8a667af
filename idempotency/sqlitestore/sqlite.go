package sqlitestore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"

	_ "modernc.org/sqlite" // registers the pure-Go "sqlite" driver

	"github.com/acemq/msgaudit/idempotency"
	"github.com/acemq/msgaudit/internal/claimkit"
)

// Table is the table an SQLite store keeps its keys in.
const Table = "msgaudit_idempotency"

// sqliteSchema creates the table and its expiry index; it is idempotent.
// key is Key.StorageKey(MaxKeyLength); state is 'claimed' or 'confirmed';
// owner is the claim's token; expires_at and updated_at are Unix
// nanoseconds of the store's clock. A row with expires_at <= now is gone:
// an expired claim may be taken over, an expired confirmation is forgotten.
const sqliteSchema = `
CREATE TABLE IF NOT EXISTS ` + Table + ` (
	key        TEXT    NOT NULL PRIMARY KEY,
	state      TEXT    NOT NULL CHECK (state IN ('claimed', 'confirmed')),
	owner      TEXT    NOT NULL,
	expires_at INTEGER NOT NULL,
	updated_at INTEGER NOT NULL
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS ` + Table + `_expires ON ` + Table + ` (expires_at);`

// sqliteClaimIfFree inserts a claim, or overwrites the existing row only
// if it expired; RETURNING yields a row only when the claim was taken.
// ?1 key, ?2 token, ?3 claim expiry, ?4 now.
const sqliteClaimIfFree = `
INSERT INTO ` + Table + ` (key, state, owner, expires_at, updated_at)
VALUES (?1, 'claimed', ?2, ?3, ?4)
ON CONFLICT (key) DO UPDATE SET
	state = 'claimed', owner = excluded.owner, expires_at = excluded.expires_at, updated_at = excluded.updated_at
WHERE ` + Table + `.expires_at <= ?4
RETURNING owner`

// sqliteStateOf reads the state of a live row: ?1 key, ?2 now.
const sqliteStateOf = `SELECT state FROM ` + Table + ` WHERE key = ?1 AND expires_at > ?2`

// held is the condition for acting on a claim: ?1 key, ?2 token, ?3 now.
const sqliteHeld = `key = ?1 AND owner = ?2 AND state = 'claimed' AND expires_at > ?3`

const (
	sqliteConfirm     = `UPDATE ` + Table + ` SET state = 'confirmed', expires_at = ?4, updated_at = ?3 WHERE ` + sqliteHeld
	sqliteRelease     = `DELETE FROM ` + Table + ` WHERE ` + sqliteHeld
	sqliteRenew       = `UPDATE ` + Table + ` SET expires_at = ?4, updated_at = ?3 WHERE ` + sqliteHeld
	sqliteIsConfirmed = `SELECT EXISTS (SELECT 1 FROM ` + Table + ` WHERE key = ?1 AND state = 'confirmed' AND expires_at > ?2)`
	sqlitePurge       = `DELETE FROM ` + Table + ` WHERE key IN (SELECT key FROM ` + Table + ` WHERE expires_at <= ?1 LIMIT ?2)`
)

// sqliteDefaults are the pragmas Open sets unless the path's own
// query string sets the same pragma.
var sqliteDefaults = []struct{ name, param string }{
	{"journal_mode", "_pragma=journal_mode(WAL)"},
	{"busy_timeout", "_pragma=busy_timeout(5000)"},
	{"synchronous", "_pragma=synchronous(FULL)"},
	{"_txlock", "_txlock=immediate"},
}

// Store is the embedded durable idempotency.Store: one file, written through
// modernc.org/sqlite (pure Go, no cgo) in WAL mode, that survives a restart
// of the process. Several processes may share the file; SQLite's locking
// and a 5 s busy timeout serialise their writers.
//
// TryClaim and Claim first read the key's live row, if any: a claimed or
// confirmed key is answered by that one read, without a transaction. A
// free key is taken in one IMMEDIATE transaction (the write lock is taken
// at BEGIN, so the answer cannot go stale before COMMIT): an upsert that
// takes the key only if it is free or expired, with RETURNING telling
// whether it did, and only when it did not (another writer got in
// between), a read of the live row's state. A refused claim writes nothing
// and costs no disk sync.
// Confirm, Release and Renew are one conditional UPDATE or DELETE each,
// checked through RowsAffected. Within a process the store uses a single
// connection: SQLite admits one writer at a time anyway, and every
// operation but IsConfirmed writes, so more connections would only turn
// waiting in the pool into SQLITE_BUSY retries.
//
// Time comes from Options.Clock and is stored as Unix nanoseconds, so all
// processes sharing a file should have roughly synchronised clocks.
// Expired rows are invisible at once and deleted by Purge.
//
// Commits use synchronous=FULL, so a confirmation survives a power loss;
// pass "?_pragma=synchronous(NORMAL)" in the path to trade that for
// faster commits (a crash of the machine, not of the process, may then
// forget the last confirmations and run that work again).
//
// A Store is safe for concurrent use.
type Store struct {
	db     *sql.DB
	o      idempotency.Options
	closed atomic.Bool

	claimIfFree, stateOf, confirm, release, renew, isConfirmed, purge *sql.Stmt
}

var _ idempotency.Store = (*Store)(nil)

// Open opens (creating if needed) the store in the SQLite file at
// path and creates its table. path may end in a query string of
// modernc.org/sqlite DSN parameters ("x.db?_pragma=synchronous(NORMAL)");
// a pragma given there replaces the store's default for it. The store
// owns the database handle: Close closes it.
func Open(ctx context.Context, path string, o idempotency.Options) (*Store, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	o, err := o.Normalize()
	if err != nil {
		return nil, err
	}
	if path == "" {
		return nil, errors.New("idempotency: sqlite: empty path")
	}
	file, query, _ := strings.Cut(path, "?")
	params := []string{}
	if query != "" {
		params = append(params, query)
	}
	for _, d := range sqliteDefaults {
		if !strings.Contains(strings.ToLower(query), d.name) {
			params = append(params, d.param)
		}
	}
	db, err := sql.Open("sqlite", file+"?"+strings.Join(params, "&"))
	if err != nil {
		return nil, fmt.Errorf("idempotency: sqlite %s: %w", file, err)
	}
	db.SetMaxOpenConns(1)
	db.SetMaxIdleConns(1)
	db.SetConnMaxLifetime(0)
	db.SetConnMaxIdleTime(0)
	s := &Store{db: db, o: o}
	if err := s.init(); err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("idempotency: sqlite %s: %w", file, err)
	}
	return s, nil
}

func (s *Store) init() error {
	ctx := context.Background()
	if _, err := s.db.ExecContext(ctx, sqliteSchema); err != nil {
		return err
	}
	for _, p := range []struct {
		stmt **sql.Stmt
		sql  string
	}{
		{&s.claimIfFree, sqliteClaimIfFree},
		{&s.stateOf, sqliteStateOf},
		{&s.confirm, sqliteConfirm},
		{&s.release, sqliteRelease},
		{&s.renew, sqliteRenew},
		{&s.isConfirmed, sqliteIsConfirmed},
		{&s.purge, sqlitePurge},
	} {
		st, err := s.db.PrepareContext(ctx, p.sql)
		if err != nil {
			return err
		}
		*p.stmt = st
	}
	return nil
}

// begin returns ctx's error, ErrClosed or the key's error, checked before
// any I/O, so a cancelled context changes nothing.
func (s *Store) begin(ctx context.Context, k idempotency.Key) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if s.closed.Load() {
		return idempotency.ErrClosed
	}
	return k.Validate()
}

// fail turns a driver error into the error returned: ctx's error when the
// context ended (the statement was interrupted and rolled back), ErrClosed
// after Close, otherwise the error wrapped with the operation's name.
func (s *Store) fail(ctx context.Context, op string, err error) error {
	if ctxErr := ctx.Err(); ctxErr != nil {
		return ctxErr
	}
	if s.closed.Load() || errors.Is(err, sql.ErrConnDone) {
		return idempotency.ErrClosed
	}
	return fmt.Errorf("idempotency: sqlite %s: %w", op, err)
}

// TryClaim claims key if it is free, in one transaction; otherwise it reports
// AlreadyConfirmed or InProgress.
func (s *Store) TryClaim(ctx context.Context, key idempotency.Key) (idempotency.Outcome, idempotency.Claim, error) {
	if err := s.begin(ctx, key); err != nil {
		return 0, idempotency.Claim{}, err
	}
	now := s.o.Clock.Now()
	nowN := now.UnixNano()
	tok := claimkit.NewToken()
	sk := key.StorageKey(s.o.MaxKeyLength)
	// Fast path: a live row answers without a transaction. The answer is
	// as fresh as any (it describes the key at the moment of the read).
	var state string
	switch err := s.stateOf.QueryRowContext(ctx, sk, nowN).Scan(&state); {
	case err == nil:
		return stateOutcome(state), idempotency.Claim{}, nil
	case !errors.Is(err, sql.ErrNoRows):
		return 0, idempotency.Claim{}, s.fail(ctx, "try-claim", err)
	}
	tx, err := s.db.BeginTx(ctx, nil) // BEGIN IMMEDIATE (_txlock)
	if err != nil {
		return 0, idempotency.Claim{}, s.fail(ctx, "try-claim", err)
	}
	defer tx.Rollback() //nolint:errcheck // a no-op after Commit
	var owner string
	err = tx.StmtContext(ctx, s.claimIfFree).QueryRowContext(ctx, sk, tok, addNanos(nowN, s.o.ClaimTTL), nowN).Scan(&owner)
	switch {
	case err == nil && owner == tok:
		if err := tx.Commit(); err != nil {
			return 0, idempotency.Claim{}, s.fail(ctx, "try-claim", err)
		}
		return idempotency.Claimed, idempotency.Claim{Key: key, Token: tok, Expires: now.Add(s.o.ClaimTTL)}, nil
	case err == nil:
		return 0, idempotency.Claim{}, fmt.Errorf("idempotency: sqlite try-claim: upsert returned owner %q, not the new token", owner)
	case !errors.Is(err, sql.ErrNoRows):
		return 0, idempotency.Claim{}, s.fail(ctx, "try-claim", err)
	}
	if err := tx.StmtContext(ctx, s.stateOf).QueryRowContext(ctx, sk, nowN).Scan(&state); err != nil {
		// ErrNoRows cannot happen: the row exists and is live, or the
		// upsert would have taken it, and the write lock is held.
		return 0, idempotency.Claim{}, s.fail(ctx, "try-claim", err)
	}
	if err := tx.Commit(); err != nil {
		return 0, idempotency.Claim{}, s.fail(ctx, "try-claim", err)
	}
	return stateOutcome(state), idempotency.Claim{}, nil
}

// stateOutcome is TryClaim's answer for a live row in state.
func stateOutcome(state string) idempotency.Outcome {
	if state == "confirmed" {
		return idempotency.AlreadyConfirmed
	}
	return idempotency.InProgress
}

// update runs one conditional statement on a held claim and maps "no row
// changed" to ErrClaimLost.
func (s *Store) update(ctx context.Context, op string, st *sql.Stmt, c idempotency.Claim, nowN, expires int64) error {
	if err := s.begin(ctx, c.Key); err != nil {
		return err
	}
	if c.Token == "" {
		return idempotency.ErrClaimLost
	}
	args := []any{c.Key.StorageKey(s.o.MaxKeyLength), c.Token, nowN}
	if st != s.release {
		args = append(args, expires)
	}
	res, err := st.ExecContext(ctx, args...)
	if err != nil {
		return s.fail(ctx, op, err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return s.fail(ctx, op, err)
	}
	if n == 0 {
		return idempotency.ErrClaimLost
	}
	return nil
}

// Confirm marks the work finished and remembers it for the retention
// period. It returns ErrClaimLost, changing nothing, unless c is a live
// claim on its key.
func (s *Store) Confirm(ctx context.Context, c idempotency.Claim) error {
	nowN := s.o.Clock.Now().UnixNano()
	return s.update(ctx, "confirm", s.confirm, c, nowN, addNanos(nowN, s.o.Retention))
}

// Release deletes the claim so the next delivery can claim the key. It
// returns ErrClaimLost, changing nothing, unless c is a live claim.
func (s *Store) Release(ctx context.Context, c idempotency.Claim) error {
	return s.update(ctx, "release", s.release, c, s.o.Clock.Now().UnixNano(), 0)
}

// Renew extends a live claim to now plus the claim TTL and returns the
// renewed claim. It returns ErrClaimLost, changing nothing, unless c is a
// live claim.
func (s *Store) Renew(ctx context.Context, c idempotency.Claim) (idempotency.Claim, error) {
	now := s.o.Clock.Now()
	nowN := now.UnixNano()
	if err := s.update(ctx, "renew", s.renew, c, nowN, addNanos(nowN, s.o.ClaimTTL)); err != nil {
		return idempotency.Claim{}, err
	}
	c.Expires = now.Add(s.o.ClaimTTL)
	return c, nil
}

// IsConfirmed reports whether key is confirmed and still retained.
func (s *Store) IsConfirmed(ctx context.Context, key idempotency.Key) (bool, error) {
	if err := s.begin(ctx, key); err != nil {
		return false, err
	}
	var ok bool
	err := s.isConfirmed.QueryRowContext(ctx, key.StorageKey(s.o.MaxKeyLength), s.o.Clock.Now().UnixNano()).Scan(&ok)
	if err != nil {
		return false, s.fail(ctx, "is-confirmed", err)
	}
	return ok, nil
}

// Purge deletes expired claims and confirmations, at most batch rows per
// statement (batch <= 0 means 1000), each batch its own short transaction
// found through the expires_at index, so other operations interleave with
// a long purge instead of waiting behind one big delete. It returns how
// many rows it deleted; on error or cancellation, the batches already
// deleted stay deleted.
func (s *Store) Purge(ctx context.Context, batch int) (int64, error) {
	if err := s.begin(ctx, idempotency.Key{ID: "-"}); err != nil {
		return 0, err
	}
	if batch <= 0 {
		batch = 1000
	}
	nowN := s.o.Clock.Now().UnixNano()
	var total int64
	for {
		res, err := s.purge.ExecContext(ctx, nowN, batch)
		if err != nil {
			return total, s.fail(ctx, "purge", err)
		}
		n, err := res.RowsAffected()
		if err != nil {
			return total, s.fail(ctx, "purge", err)
		}
		total += n
		if n < int64(batch) {
			return total, nil
		}
		if err := ctx.Err(); err != nil {
			return total, err
		}
	}
}

// Close closes the database; later calls return ErrClosed. Close is
// idempotent.
func (s *Store) Close() error {
	if s.closed.Swap(true) {
		return nil
	}
	return s.db.Close()
}
