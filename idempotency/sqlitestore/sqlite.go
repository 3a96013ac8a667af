package sqlitestore

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	_ "modernc.org/sqlite" // registers the pure-Go "sqlite" driver

	"github.com/acemq/msgaudit/idempotency"
	"github.com/acemq/msgaudit/internal/claimkit"
	"github.com/acemq/msgaudit/internal/purgeloop"
)

// Table is the table an SQLite store keeps its keys in.
const Table = "msgaudit_idempotency"

// sqliteSchema creates the table and its expiry index; it is idempotent.
// key is the storage key (see Options.MaxKeyLength); state is 'claimed' or 'confirmed';
// owner is the claim's token; expires_at and updated_at are Unix
// nanoseconds of the store's clock. updated_at is when the row took its
// state: when the claim was taken (a renewal leaves it) or confirmed. A
// row with expires_at <= now is gone: an expired claim may be taken over,
// an expired confirmation is forgotten.
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
	sqliteRenew       = `UPDATE ` + Table + ` SET expires_at = ?4 WHERE ` + sqliteHeld
	sqliteIsConfirmed = `SELECT EXISTS (SELECT 1 FROM ` + Table + ` WHERE key = ?1 AND state = 'confirmed' AND expires_at > ?2)`
	sqlitePurge       = `DELETE FROM ` + Table + ` WHERE key IN (SELECT key FROM ` + Table + ` WHERE expires_at <= ?1 LIMIT ?2)`
)

// sqliteBacklog samples the table (see Store.Backlog): the row count,
// then the live claims among the rows expiring within one claim TTL (at
// most backlogHeldCap of them) and the oldest of their updated_at, then
// the oldest updated_at among the backlogFirstRows rows that expire
// first. ?1 now, ?2 now plus the claim TTL, ?3 backlogHeldCap, ?4
// backlogFirstRows.
const sqliteBacklog = `SELECT (SELECT count(*) FROM ` + Table + `), h.n, h.m, f.m
FROM (SELECT count(*) AS n, min(updated_at) AS m FROM (
	SELECT updated_at FROM ` + Table + ` WHERE expires_at > ?1 AND expires_at <= ?2 AND state = 'claimed' LIMIT ?3)) AS h,
(SELECT min(updated_at) AS m FROM (SELECT updated_at FROM ` + Table + ` ORDER BY expires_at LIMIT ?4)) AS f`

// Store is the embedded durable idempotency.Store: one file, written through
// modernc.org/sqlite (pure Go, no cgo) in WAL mode, that survives a restart
// of the process. Several processes may share the file; SQLite's locking
// and a 5 s busy timeout serialise their writers.
//
// TryClaim first reads the key's live row, if any: a claimed or confirmed
// key is answered by that one read, without a write transaction. A free
// key is taken in one IMMEDIATE transaction (the write lock is taken at
// BEGIN, so the answer cannot go stale before COMMIT): an upsert that
// takes the key only if it is free or expired, with RETURNING telling
// whether it did, and only when it did not (another writer got in
// between), a read of the live row's state. A refused claim writes
// nothing and costs no disk sync. Confirm, Release and Renew are one
// conditional UPDATE or DELETE each in an IMMEDIATE transaction, checked
// through the number of rows it changed.
//
// Store is an idempotency.BatchStore: TryClaimBatch, ConfirmBatch and
// ReleaseBatch run the same statements for all their keys in one
// IMMEDIATE transaction, so a batch costs one commit (and, with
// SyncFull, one disk sync).
//
// Within a process the store uses one connection, held by one operation at
// a time: SQLite admits one writer at a time anyway, and every operation
// but IsConfirmed writes, so more connections would only turn waiting in
// the pool into SQLITE_BUSY retries. Every statement is prepared once, at
// Open. The caller's context bounds the wait for that connection and for
// the write lock (BEGIN IMMEDIATE under busy_timeout); the statements after
// BEGIN run to COMMIT without watching it, so a cancellation never leaves
// a commit half-known and costs no watcher per statement.
//
// Time comes from Options.Clock and is stored as Unix nanoseconds, so all
// processes sharing a file should have roughly synchronised clocks.
// Expired rows are invisible at once and deleted by Purge, which the store
// runs on its own every Options.PurgeInterval (every hour by default): each
// batch takes the connection and the write lock once, like a Confirm.
//
// A Store is safe for concurrent use.
type Store struct {
	db     *sql.DB
	conn   *sql.Conn
	sem    chan struct{} // holds the connection: one operation at a time
	o      idempotency.Options
	sync   Synchronous
	closed atomic.Bool

	begin, commit, rollback                                           *stmt
	claimIfFree, stateOf, confirm, release, renew, isConfirmed, purge *stmt
	// Used only while holding sem: the statements' argument and result
	// buffers, and the body run's Raw callback calls.
	args [4]driver.NamedValue
	dest [1]driver.Value
	body func() error
	raw  func(any) error

	purged purgeloop.Counters
	purger *purgeloop.Loop
}

var (
	_ idempotency.Store      = (*Store)(nil)
	_ idempotency.BatchStore = (*Store)(nil)
)

// bg is the context of the statements that must not be cut short: those
// after BEGIN, up to and including COMMIT or ROLLBACK, and the one-read
// queries (WAL readers take no lock a writer holds). Without a Done
// channel, modernc.org/sqlite starts no goroutine to watch it.
var bg = context.Background()

// Open opens (creating if needed) the store in the SQLite file at path and
// creates its table. path may end in a query string: synchronous=normal or
// synchronous=full (the durability of a commit, default normal; see the
// package documentation), and modernc.org/sqlite DSN parameters
// ("x.db?_pragma=busy_timeout(10000)"); a pragma given there replaces the
// store's default for it. A bad synchronous value, or one that disagrees
// with opts.Synchronous, is an error, and so is an in-memory database
// (":memory:", mode=memory), whose keys would not outlive the store. The
// store owns the database handle: Close closes it. Open starts the
// automatic purge of expired rows (Options.PurgeInterval); Close stops it.
func Open(ctx context.Context, path string, opts Options) (*Store, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	o, err := claimkit.Normalize(opts.Options)
	if err != nil {
		return nil, err
	}
	if path == "" {
		return nil, errors.New("idempotency: sqlite: empty path")
	}
	file, name, sync, err := dsn(path, opts)
	if err != nil {
		return nil, err
	}
	db, err := sql.Open("sqlite", name)
	if err != nil {
		return nil, fmt.Errorf("idempotency: sqlite %s: %w", file, err)
	}
	db.SetMaxOpenConns(1)
	db.SetMaxIdleConns(1)
	db.SetConnMaxLifetime(0)
	db.SetConnMaxIdleTime(0)
	s := &Store{db: db, o: o, sync: sync, sem: make(chan struct{}, 1)}
	if err := s.init(ctx); err != nil {
		if s.conn != nil {
			_ = s.conn.Close()
		}
		_ = db.Close()
		return nil, fmt.Errorf("idempotency: sqlite %s: %w", file, err)
	}
	s.purger = purgeloop.Start(o.PurgeInterval, "idempotency: sqlite "+file, o.Logger,
		s.autoPurge)
	return s, nil
}

func (s *Store) init(ctx context.Context) error {
	conn, err := s.db.Conn(ctx)
	if err != nil {
		return err
	}
	s.conn = conn
	if _, err := conn.ExecContext(ctx, sqliteSchema); err != nil {
		return err
	}
	// An in-memory database (":memory:", mode=memory) has no file: its keys
	// would vanish when the store closes, and a redelivery after a restart
	// would be applied again.
	var file string
	if err := conn.QueryRowContext(ctx, `SELECT file FROM pragma_database_list WHERE name = 'main'`).Scan(&file); err != nil {
		return err
	}
	if file == "" {
		return errors.New("the database is in memory, not in a file: its keys would vanish when the store closes")
	}
	var sync int
	if err := conn.QueryRowContext(ctx, "PRAGMA synchronous").Scan(&sync); err != nil {
		return err
	}
	if want := int(s.sync); sync != want {
		return fmt.Errorf("synchronous is %d, not %d (%s)", sync, want, s.sync)
	}
	s.raw = func(any) error { return s.body() }
	return conn.Raw(func(dc any) error {
		return s.prepareAll(ctx, dc)
	})
}

// prepareAll prepares the store's statements on the driver connection.
func (s *Store) prepareAll(ctx context.Context, dc any) error {
	for _, p := range []struct {
		stmt **stmt
		sql  string
	}{
		{&s.begin, "BEGIN IMMEDIATE"},
		{&s.commit, "COMMIT"},
		{&s.rollback, "ROLLBACK"},
		{&s.claimIfFree, sqliteClaimIfFree},
		{&s.stateOf, sqliteStateOf},
		{&s.confirm, sqliteConfirm},
		{&s.release, sqliteRelease},
		{&s.renew, sqliteRenew},
		{&s.isConfirmed, sqliteIsConfirmed},
		{&s.purge, sqlitePurge},
	} {
		st, err := s.prepare(ctx, dc, p.sql)
		if err != nil {
			return err
		}
		*p.stmt = st
	}
	return nil
}

// Synchronous returns the durability the store's commits run with.
func (s *Store) Synchronous() Synchronous { return s.sync }

// check returns ctx's error or ErrClosed, checked before any I/O, so a
// cancelled context changes nothing.
func (s *Store) check(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if s.closed.Load() {
		return idempotency.ErrClosed
	}
	return nil
}

// lock takes the connection for one operation, or returns ctx's error
// while waiting, or ErrClosed. unlock gives it back.
func (s *Store) lock(ctx context.Context) error {
	select {
	case s.sem <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	}
	if s.closed.Load() {
		<-s.sem
		return idempotency.ErrClosed
	}
	return nil
}

func (s *Store) unlock() { <-s.sem }

// fail turns a driver error into the error returned: ctx's error when the
// context ended (a wait for the lock was given up and nothing changed),
// ErrClosed after Close, otherwise the error wrapped with the operation's
// name.
func (s *Store) fail(ctx context.Context, op string, err error) error {
	if ctxErr := ctx.Err(); ctxErr != nil {
		return ctxErr
	}
	if s.closed.Load() {
		return idempotency.ErrClosed
	}
	return fmt.Errorf("idempotency: sqlite %s: %w", op, err)
}

// beginTx starts an IMMEDIATE transaction: it waits for the write lock
// (under busy_timeout, given up when ctx ends). Inside Store.run only.
func (s *Store) beginTx(ctx context.Context, op string) error {
	if _, err := s.begin.exec(ctx); err != nil {
		s.abort()
		return s.fail(ctx, op, err)
	}
	return nil
}

// commitTx commits the transaction beginTx started; on error it rolls
// back, so the transaction changed nothing.
func (s *Store) commitTx(ctx context.Context, op string) error {
	if _, err := s.commit.exec(bg); err != nil {
		s.abort()
		return s.fail(ctx, op, err)
	}
	return nil
}

// abortTx rolls the transaction back after a statement failed and returns
// that failure.
func (s *Store) abortTx(ctx context.Context, op string, err error) error {
	s.abort()
	return s.fail(ctx, op, err)
}

// abort rolls back whatever transaction is open; without one ROLLBACK
// fails harmlessly.
func (s *Store) abort() { _, _ = s.rollback.exec(bg) }

// liveState reads the state of sk's live row at nowN, or errNoRow.
func (s *Store) liveState(sk string, nowN int64) (string, error) {
	v, err := s.stateOf.queryRow(bg, sk, nowN)
	if err != nil {
		return "", err
	}
	return text(v)
}

// TryClaim claims key if it is free, in one transaction; otherwise it
// reports AlreadyConfirmed or InProgress.
func (s *Store) TryClaim(ctx context.Context, key idempotency.Key) (out idempotency.Outcome, c idempotency.Claim, err error) {
	if err := s.check(ctx); err != nil {
		return 0, idempotency.Claim{}, err
	}
	if err := key.Validate(); err != nil {
		return 0, idempotency.Claim{}, err
	}
	err = s.run(ctx, func() error {
		now := s.o.Clock.Now()
		sk := claimkit.StorageKey(key, s.o.MaxKeyLength)
		// Fast path: a live row answers without a transaction. The
		// answer is as fresh as any (it describes the key at the moment
		// of the read).
		switch state, err := s.liveState(sk, now.UnixNano()); {
		case err == nil:
			out = stateOutcome(state)
			return nil
		case !errors.Is(err, errNoRow):
			return s.fail(ctx, "try-claim", err)
		}
		if err := s.beginTx(ctx, "try-claim"); err != nil {
			return err
		}
		var err error
		if out, c, err = s.claimInTx(key, sk, now); err != nil {
			return s.abortTx(ctx, "try-claim", err)
		}
		return s.commitTx(ctx, "try-claim")
	})
	if err != nil {
		return 0, idempotency.Claim{}, err
	}
	return out, c, nil
}

// claimInTx takes key (storage key sk) if it is free or expired at now,
// inside the transaction the caller began.
func (s *Store) claimInTx(key idempotency.Key, sk string, now time.Time) (idempotency.Outcome, idempotency.Claim, error) {
	nowN := now.UnixNano()
	tok := claimkit.NewToken()
	v, err := s.claimIfFree.queryRow(bg, sk, tok, addNanos(nowN, s.o.ClaimTTL), nowN)
	switch {
	case err == nil:
		if owner, err := text(v); err != nil || owner != tok {
			return 0, idempotency.Claim{}, fmt.Errorf("upsert returned owner %v (%v), not the new token", v, err)
		}
		return idempotency.Claimed, idempotency.Claim{Key: key, Token: tok, Expires: now.Add(s.o.ClaimTTL)}, nil
	case !errors.Is(err, errNoRow):
		return 0, idempotency.Claim{}, err
	}
	// errNoRow cannot happen here: the row exists and is live, or the
	// upsert would have taken it, and the write lock is held.
	state, err := s.liveState(sk, nowN)
	if err != nil {
		return 0, idempotency.Claim{}, err
	}
	return stateOutcome(state), idempotency.Claim{}, nil
}

// TryClaimBatch try-claims every key in one IMMEDIATE transaction, in
// slice order: res[i] is what TryClaim(keys[i]) would answer after the
// keys before it. A key that appears twice is Claimed the first time and
// InProgress after. An invalid key gets its error in res[i] and does not
// fail the batch; a failed transaction fails the whole batch and claims
// nothing.
func (s *Store) TryClaimBatch(ctx context.Context, keys []idempotency.Key, res []idempotency.ClaimResult) error {
	if len(res) != len(keys) {
		return fmt.Errorf("idempotency: sqlite try-claim batch: %d results for %d keys", len(res), len(keys))
	}
	if err := s.check(ctx); err != nil {
		return err
	}
	valid := 0
	for i, k := range keys {
		res[i] = idempotency.ClaimResult{Err: k.Validate()}
		if res[i].Err == nil {
			valid++
		}
	}
	if valid == 0 {
		return nil
	}
	return s.run(ctx, func() error {
		if err := s.beginTx(ctx, "try-claim batch"); err != nil {
			return err
		}
		now := s.o.Clock.Now()
		for i, k := range keys {
			if res[i].Err != nil {
				continue
			}
			out, c, err := s.claimInTx(k, claimkit.StorageKey(k, s.o.MaxKeyLength), now)
			if err != nil {
				return s.abortTx(ctx, "try-claim batch", err)
			}
			res[i] = idempotency.ClaimResult{Outcome: out, Claim: c}
		}
		return s.commitTx(ctx, "try-claim batch")
	})
}

// stateOutcome is TryClaim's answer for a live row in state.
func stateOutcome(state string) idempotency.Outcome {
	if state == "confirmed" {
		return idempotency.AlreadyConfirmed
	}
	return idempotency.InProgress
}

// held runs the conditional statement st of a held claim (inside the
// caller's transaction) and maps "no row changed" to ErrClaimLost. A claim
// with an invalid key or no token gets its error without a statement.
// The returned verdict is the claim's own; err is a failure of the
// statement, which fails the transaction.
func (s *Store) held(st *stmt, c idempotency.Claim, nowN, expires int64) (verdict, err error) {
	if err := c.Key.Validate(); err != nil {
		return err, nil
	}
	if c.Token == "" {
		return idempotency.ErrClaimLost, nil
	}
	var n int64
	sk := claimkit.StorageKey(c.Key, s.o.MaxKeyLength)
	if st == s.release {
		n, err = st.exec(bg, sk, c.Token, nowN)
	} else {
		n, err = st.exec(bg, sk, c.Token, nowN, expires)
	}
	if err != nil {
		return nil, err
	}
	if n == 0 {
		return idempotency.ErrClaimLost, nil
	}
	return nil, nil
}

// update runs st on one held claim in its own transaction.
func (s *Store) update(ctx context.Context, op string, st *stmt, c idempotency.Claim, nowN, expires int64) error {
	if err := s.check(ctx); err != nil {
		return err
	}
	if err := c.Key.Validate(); err != nil {
		return err
	}
	if c.Token == "" {
		return idempotency.ErrClaimLost
	}
	var verdict error
	err := s.run(ctx, func() error {
		if err := s.beginTx(ctx, op); err != nil {
			return err
		}
		var err error
		if verdict, err = s.held(st, c, nowN, expires); err != nil {
			return s.abortTx(ctx, op, err)
		}
		return s.commitTx(ctx, op)
	})
	if err != nil {
		return err
	}
	return verdict
}

// updateBatch runs st on every claim in one transaction; errs[i] is
// claims[i]'s own verdict.
func (s *Store) updateBatch(ctx context.Context, op string, st *stmt, claims []idempotency.Claim, errs []error, nowN, expires int64) error {
	if len(errs) != len(claims) {
		return fmt.Errorf("idempotency: sqlite %s: %d results for %d claims", op, len(errs), len(claims))
	}
	if err := s.check(ctx); err != nil {
		return err
	}
	if len(claims) == 0 {
		return nil
	}
	return s.run(ctx, func() error {
		if err := s.beginTx(ctx, op); err != nil {
			return err
		}
		for i, c := range claims {
			verdict, err := s.held(st, c, nowN, expires)
			if err != nil {
				return s.abortTx(ctx, op, err)
			}
			errs[i] = verdict
		}
		return s.commitTx(ctx, op)
	})
}

// Confirm marks the work finished and remembers it for the retention
// period. It returns ErrClaimLost, changing nothing, unless c is a live
// claim on its key.
func (s *Store) Confirm(ctx context.Context, c idempotency.Claim) error {
	nowN := s.o.Clock.Now().UnixNano()
	return s.update(ctx, "confirm", s.confirm, c, nowN, addNanos(nowN, s.o.Retention))
}

// ConfirmBatch confirms every claim in one transaction: errs[i] is what
// Confirm(claims[i]) would return after the claims before it (nil or
// ErrClaimLost, or the key's error). A failed transaction fails the whole
// batch and confirms nothing.
func (s *Store) ConfirmBatch(ctx context.Context, claims []idempotency.Claim, errs []error) error {
	nowN := s.o.Clock.Now().UnixNano()
	return s.updateBatch(ctx, "confirm batch", s.confirm, claims, errs, nowN, addNanos(nowN, s.o.Retention))
}

// Release deletes the claim so the next delivery can claim the key. It
// returns ErrClaimLost, changing nothing, unless c is a live claim.
func (s *Store) Release(ctx context.Context, c idempotency.Claim) error {
	return s.update(ctx, "release", s.release, c, s.o.Clock.Now().UnixNano(), 0)
}

// ReleaseBatch releases every claim in one transaction: errs[i] is what
// Release(claims[i]) would return after the claims before it. A failed
// transaction fails the whole batch and releases nothing.
func (s *Store) ReleaseBatch(ctx context.Context, claims []idempotency.Claim, errs []error) error {
	return s.updateBatch(ctx, "release batch", s.release, claims, errs, s.o.Clock.Now().UnixNano(), 0)
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
	if err := s.check(ctx); err != nil {
		return false, err
	}
	if err := key.Validate(); err != nil {
		return false, err
	}
	var ok bool
	err := s.run(ctx, func() error {
		v, err := s.isConfirmed.queryRow(bg, claimkit.StorageKey(key, s.o.MaxKeyLength), s.o.Clock.Now().UnixNano())
		if err != nil {
			return s.fail(ctx, "is-confirmed", err)
		}
		n, isInt := v.(int64)
		if !isInt {
			return s.fail(ctx, "is-confirmed", fmt.Errorf("column value %T, want an integer", v))
		}
		ok = n != 0
		return nil
	})
	return ok, err
}

// Purge deletes expired claims and confirmations, at most batch rows per
// statement (batch <= 0 means Options.PurgeBatch), each batch its own short transaction
// found through the expires_at index, so other operations interleave with
// a long purge instead of waiting behind one big delete. It returns how
// many rows it deleted; on error or cancellation, the batches already
// deleted stay deleted.
func (s *Store) Purge(ctx context.Context, batch int) (n int64, err error) {
	t0 := time.Now()
	defer func() { s.purged.Observe(n, time.Since(t0), err) }()
	return s.purgeExpired(ctx, batch, purgeloop.Unpaced)
}

// PurgeStats returns the counters of the store's purges, the automatic
// ones and the calls of Purge.
func (s *Store) PurgeStats() idempotency.PurgeStats {
	runs, rows, errs, busy := s.purged.Load()
	return idempotency.PurgeStats{Runs: runs, Rows: rows, Errors: errs, Time: busy}
}

// purgeExpired is Purge without the counting; see purgeloop.Batches for
// pace.
func (s *Store) purgeExpired(ctx context.Context, batch int, pace int) (int64, error) {
	if err := s.check(ctx); err != nil {
		return 0, err
	}
	if batch <= 0 {
		batch = s.o.PurgeBatch
	}
	nowN := s.o.Clock.Now().UnixNano()
	return purgeloop.Batches(ctx, batch, pace, func(ctx context.Context) (int64, error) {
		var n int64
		err := s.run(ctx, func() error {
			if err := s.beginTx(ctx, "purge"); err != nil {
				return err
			}
			var err error
			if n, err = s.purge.exec(bg, nowN, int64(batch)); err != nil {
				return s.abortTx(ctx, "purge", err)
			}
			return s.commitTx(ctx, "purge")
		})
		return n, err
	})
}

// autoPurge is the automatic purge: Purge, paced.
func (s *Store) autoPurge(ctx context.Context) (n int64, err error) {
	t0 := time.Now()
	defer func() { s.purged.Observe(n, time.Since(t0), err) }()
	return s.purgeExpired(ctx, 0, purgeloop.SQLite)
}

// Backlog samples the store (see idempotency.Backlog) in one read
// statement on the store's connection, with the store's clock. Held and
// OldestHeld come from the expires_at index: the claims among the rows
// expiring within one ClaimTTL (a live claim expires within it; a claim
// taken with a longer ClaimTTL by another process is missed until then),
// counted up to backlogHeldCap; that range also holds the confirmations
// about to be forgotten, one ClaimTTL's worth of traffic from Retention
// ago, which the statement reads and skips. OldestRow is the oldest
// among the live claims and the backlogFirstRows rows that expire first
// (the oldest confirmation, or an expired row not yet purged). Rows is
// an exact count(*), which SQLite answers by reading the whole expires_at
// index: about 13 ms per million rows, during which claims wait for the
// connection.
func (s *Store) Backlog(ctx context.Context) (idempotency.Backlog, error) {
	if err := s.check(ctx); err != nil {
		return idempotency.Backlog{}, err
	}
	if err := s.lock(ctx); err != nil {
		return idempotency.Backlog{}, err
	}
	defer s.unlock()
	nowN := s.o.Clock.Now().UnixNano()
	var rows, held int64
	var oldestHeld, oldestFirst sql.NullInt64
	err := s.conn.QueryRowContext(ctx, sqliteBacklog, nowN, addNanos(nowN, s.o.ClaimTTL), backlogHeldCap, backlogFirstRows).
		Scan(&rows, &held, &oldestHeld, &oldestFirst)
	if err != nil {
		return idempotency.Backlog{}, s.fail(ctx, "backlog", err)
	}
	b := idempotency.Backlog{Held: held, Rows: rows}
	oldest := nowN
	if oldestHeld.Valid {
		oldest = min(oldest, oldestHeld.Int64)
		b.OldestHeld = time.Duration(max(nowN-oldestHeld.Int64, 0))
	}
	if oldestFirst.Valid {
		oldest = min(oldest, oldestFirst.Int64)
	}
	b.OldestRow = time.Duration(nowN - oldest)
	return b, nil
}

// backlogHeldCap bounds the claims Backlog counts, and backlogFirstRows
// the rows it reads at the head of the expires_at index.
const (
	backlogHeldCap   = 10000
	backlogFirstRows = 1000
)

// Close stops the automatic purge (waiting for a purge in progress to
// stop after its current batch), waits for the operation in progress, if
// any, and closes the database; later calls return ErrClosed. Close is
// idempotent.
func (s *Store) Close() error {
	if s.closed.Swap(true) {
		return nil
	}
	s.purger.Stop()
	s.sem <- struct{}{}
	defer s.unlock()
	err := s.conn.Raw(func(any) error {
		for _, st := range []*stmt{s.begin, s.commit, s.rollback, s.claimIfFree, s.stateOf, s.confirm, s.release, s.renew, s.isConfirmed, s.purge} {
			if st != nil {
				_ = st.ds.Close()
			}
		}
		return nil
	})
	if e := s.conn.Close(); err == nil {
		err = e
	}
	if e := s.db.Close(); err == nil {
		err = e
	}
	return err
}
