// Package claimsql is the part of the SQL idempotency stores (PostgreSQL
// and MySQL/MariaDB) that is the same on both: confirming and releasing a
// held claim, reading a confirmation, the purge of expired rows with its
// loop and counters, and closing. A backend gives its statements and the
// few things its database does differently (Dialect); claiming, renewing,
// batches and the backlog stay in the backend.
package claimsql

import (
	"context"
	"database/sql"
	"time"

	"github.com/acemq/msgaudit/idempotency"
	"github.com/acemq/msgaudit/internal/claimkit"
	"github.com/acemq/msgaudit/internal/purgeloop"
	"github.com/acemq/msgaudit/internal/sqldb"
)

// Dialect holds a backend's statements. The parameters are the storage
// key (sk), the claim's owner token and the retention in microseconds.
type Dialect struct {
	// Confirm turns sk's live claim by token into a confirmation retained
	// for the retention: (retention µs, sk, token); one row changed, or
	// none when the claim is no longer held.
	Confirm string
	// Release deletes sk's live claim by token: (sk, token).
	Release string
	// IsConfirmed selects whether sk holds a retained confirmation: (sk).
	IsConfirmed string
	// Purge deletes one batch of expired rows, oldest first: (batch) and,
	// with Resume, the expiry the batch starts from.
	Purge string
	// Resume: Purge returns (rows deleted, the newest expiry among them),
	// and the next batch starts there, skipping the index entries of
	// rows deleted before (PostgreSQL); else it changes rows and returns
	// none (MySQL).
	Resume bool
	// Pace is the automatic purge's (see purgeloop.Batches).
	Pace int
}

// Store is the shared part of a SQL store.
type Store struct {
	G        *claimkit.Guard
	db       sqldb.DB
	d        Dialect
	o        idempotency.Options
	retainUS int64
	purged   purgeloop.Counters
	purger   *purgeloop.Loop
}

// New returns the shared part of a store with normalized options o,
// running d's statements on db and checking calls with g. Its automatic
// purge is off until StartPurge.
func New(db sqldb.DB, g *claimkit.Guard, d Dialect, o idempotency.Options) *Store {
	return &Store{G: g, db: db, d: d, o: o, retainUS: claimkit.Micros(o.Retention),
		purger: purgeloop.Start(-1, "", nil, nil)}
}

// StartPurge starts the automatic purge (Options.PurgeInterval), logged
// as the purge of what.
func (s *Store) StartPurge(what string) {
	s.purger = purgeloop.Start(s.o.PurgeInterval, what, s.o.Logger, s.autoPurge)
}

// PurgeDone returns a channel closed once the automatic purge stopped.
func (s *Store) PurgeDone() <-chan struct{} { return s.purger.Done() }

// Confirm implements idempotency.Store: ErrClaimLost when the row no
// longer holds the caller's live claim.
func (s *Store) Confirm(ctx context.Context, c idempotency.Claim) error {
	sk, err := s.G.Owner(ctx, c)
	if err != nil {
		return err
	}
	n, err := s.db.Exec(ctx, s.d.Confirm, s.retainUS, sk, c.Token)
	return s.oneRow(ctx, "confirm", n, err)
}

// Release implements idempotency.Store: it deletes the caller's live
// claim; ErrClaimLost when the row no longer holds it.
func (s *Store) Release(ctx context.Context, c idempotency.Claim) error {
	sk, err := s.G.Owner(ctx, c)
	if err != nil {
		return err
	}
	n, err := s.db.Exec(ctx, s.d.Release, sk, c.Token)
	return s.oneRow(ctx, "release", n, err)
}

// oneRow turns the outcome of a statement that changes one held claim
// into nil or ErrClaimLost.
func (s *Store) oneRow(ctx context.Context, op string, n int64, err error) error {
	if err != nil {
		return s.G.Error(ctx, op, err)
	}
	if n != 1 {
		return idempotency.ErrClaimLost
	}
	return nil
}

// IsConfirmed implements idempotency.Store.
func (s *Store) IsConfirmed(ctx context.Context, key idempotency.Key) (bool, error) {
	sk, err := s.G.Key(ctx, key)
	if err != nil {
		return false, err
	}
	var ok bool
	if err := s.db.QueryRow(ctx, s.d.IsConfirmed, sk).Scan(&ok); err != nil {
		return false, s.G.Error(ctx, "is-confirmed", err)
	}
	return ok, nil
}

// Purge deletes expired rows (lapsed claims and confirmations past their
// retention) in batches of at most batch rows (batch <= 0 means
// Options.PurgeBatch), back to back, each its own short statement; it
// stops after the first short batch and returns how many rows it
// deleted, with the error that stopped it, if any.
func (s *Store) Purge(ctx context.Context, batch int) (n int64, err error) {
	t0 := time.Now()
	defer func() { s.purged.Observe(n, time.Since(t0), err) }()
	return s.purge(ctx, batch, purgeloop.Unpaced)
}

// PurgeStats returns the counters of the purges: the automatic ones and
// the calls of Purge.
func (s *Store) PurgeStats() idempotency.PurgeStats {
	runs, rows, errs, busy := s.purged.Load()
	return idempotency.PurgeStats{Runs: runs, Rows: rows, Errors: errs, Time: busy}
}

// autoPurge is the automatic purge: Purge, paced.
func (s *Store) autoPurge(ctx context.Context) (n int64, err error) {
	t0 := time.Now()
	defer func() { s.purged.Observe(n, time.Since(t0), err) }()
	return s.purge(ctx, 0, s.d.Pace)
}

// purge is Purge without the counting.
func (s *Store) purge(ctx context.Context, batch, pace int) (int64, error) {
	if batch <= 0 {
		batch = s.o.PurgeBatch
	}
	var from time.Time // with Resume: where the next batch starts
	return purgeloop.Batches(ctx, batch, pace, func(ctx context.Context) (int64, error) {
		if err := s.G.Begin(ctx); err != nil {
			return 0, err
		}
		var n int64
		var err error
		if s.d.Resume {
			var last sql.NullTime
			err = s.db.QueryRow(ctx, s.d.Purge, batch, from).Scan(&n, &last)
			if err == nil && last.Valid {
				from = last.Time
			}
		} else {
			n, err = s.db.Exec(ctx, s.d.Purge, batch)
		}
		if err != nil {
			return 0, s.G.Error(ctx, "purge", err)
		}
		return n, nil
	})
}

// Close marks the store closed (later calls return ErrClosed), stops the
// automatic purge (waiting for a purge in progress to stop at its next
// statement) and, on the first call, runs closeConn when it is not nil.
func (s *Store) Close(closeConn func() error) error {
	if !s.G.Close() {
		return nil
	}
	s.purger.Stop()
	if closeConn != nil {
		return closeConn()
	}
	return nil
}
