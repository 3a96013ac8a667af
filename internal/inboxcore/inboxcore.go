// Package inboxcore is what the inbox's two front ends, package inbox on
// database/sql and package pgxinbox on pgx, share beyond the batching
// lanes (internal/inboxlane) and the statements (internal/inboxsql):
// keying a delivery, the read-only statements (Contains, Backlog), the
// purge, its loop and its counters. A front end keeps only its driver's
// calls (begin a transaction, the per-delivery INSERT) and its exported
// methods, which forward here.
package inboxcore

import (
	"context"
	"database/sql"
	"fmt"
	"log/slog"
	"time"

	"github.com/acemq/msgaudit/idempotency"
	"github.com/acemq/msgaudit/internal/inboxlane"
	"github.com/acemq/msgaudit/internal/inboxsql"
	"github.com/acemq/msgaudit/internal/outboxid"
	"github.com/acemq/msgaudit/internal/purgeloop"
	"github.com/acemq/msgaudit/internal/sqldb"
	"github.com/acemq/msgaudit/receiver"
)

// Config is what a front end validated and built at New.
type Config struct {
	DB           sqldb.DB
	SQL          inboxsql.SQL
	Namespace    string        // Options.Namespace
	MaxKeyLength int           // in effect (inboxsql.Limits)
	PurgeBatch   int           // in effect (inboxsql.Limits)
	Retention    time.Duration // in effect (inboxsql.Limits)
	Pace         int           // the automatic purge's pace (purgeloop.Batches)
	Count        inboxsql.Counter
	Lanes        *inboxlane.Pool
	// Sized reports that the number of lanes is fixed (Options.Lanes was
	// set, or the dialect fixes it): SizeLanes leaves it.
	Sized bool
}

// Core is the shared part of an Inbox. Its zero value is not usable; make
// it with New.
type Core struct {
	c         Config
	namespace func(m *receiver.Message) string
	purged    purgeloop.Counters
	purger    *purgeloop.Loop
}

// New returns a Core for c. Start the automatic purge with StartPurge.
func New(c Config) *Core {
	return &Core{c: c, namespace: inboxsql.Namespacer(c.Namespace)}
}

// StartPurge starts the automatic purge every interval (0: none), logged
// to log as the purge of what.
func (k *Core) StartPurge(interval time.Duration, what string, log *slog.Logger) {
	k.purger = purgeloop.Start(interval, what, log, k.autoPurge)
}

// PurgeDone returns a channel closed when the automatic purge has stopped.
func (k *Core) PurgeDone() <-chan struct{} { return k.purger.Done() }

// Close stops the automatic purge and waits for a purge in progress to
// stop at its next statement.
func (k *Core) Close() error {
	k.purger.Stop()
	return nil
}

// Namespace returns the namespace m's key is recorded under.
func (k *Core) Namespace(m *receiver.Message) string { return k.namespace(m) }

// Lanes returns the number of lanes.
func (k *Core) Lanes() int { return k.c.Lanes.Lanes() }

// SizeLanes sets the number of lanes to handlers unless they are fixed,
// and returns the number in effect.
func (k *Core) SizeLanes(handlers int) int {
	if !k.c.Sized && handlers > 0 {
		k.c.Lanes.SetLanes(handlers)
	}
	return k.c.Lanes.Lanes()
}

// Select keys m (its namespace and idempotency key, hashed beyond
// MaxKeyLength) and hands it to the lanes.
func (k *Core) Select(ctx context.Context, m *receiver.Message) (receiver.Decision, error) {
	key := m.IdempotencyKey()
	if key == "" {
		return receiver.Decision{}, fmt.Errorf("%w: inbox: empty key", receiver.ErrBadKey)
	}
	ns := inboxsql.StorageKey(k.namespace(m), k.c.MaxKeyLength)
	key = inboxsql.StorageKey(key, k.c.MaxKeyLength)
	d, err := k.c.Lanes.Select(ctx, ns, key)
	if inner := d.Context; inner != nil {
		// The delivery rides along for the outbox: the ids of what the
		// handler sends derive from it, and its trace context goes on.
		d.Context = func(c context.Context) context.Context {
			return outboxid.With(inner(c), ns, key, m.Headers)
		}
	}
	return d, err
}

// Contains reports whether key is recorded under namespace (both as given
// to the inbox, before hashing).
func (k *Core) Contains(ctx context.Context, namespace, key string) (bool, error) {
	var ok bool
	err := k.c.DB.QueryRow(ctx, k.c.SQL.Contains,
		inboxsql.StorageKey(namespace, k.c.MaxKeyLength), inboxsql.StorageKey(key, k.c.MaxKeyLength)).Scan(&ok)
	if err != nil {
		return false, fmt.Errorf("inbox: contains: %w", err)
	}
	return ok, nil
}

// Backlog samples the inbox in one statement.
func (k *Core) Backlog(ctx context.Context) (idempotency.Backlog, error) {
	var rows, oldest sql.NullInt64
	t0 := time.Now()
	err := k.c.DB.QueryRow(ctx, k.c.SQL.Backlog, k.c.SQL.BacklogArgs()...).Scan(&rows, &oldest)
	if err != nil {
		return idempotency.Backlog{}, fmt.Errorf("inbox: backlog: %w", err)
	}
	return k.c.SQL.BacklogOf(rows, oldest, t0), nil
}

// PurgeStats returns the counters of the purges: the automatic ones and
// the calls of Purge and PurgeExpired.
func (k *Core) PurgeStats() idempotency.PurgeStats {
	runs, rows, errs, busy := k.purged.Load()
	return idempotency.PurgeStats{Runs: runs, Rows: rows, Errors: errs, Time: busy}
}

// Purge deletes the rows recorded before olderThan, in batches back to
// back, and counts the run.
func (k *Core) Purge(ctx context.Context, olderThan time.Time) (n int64, err error) {
	t0 := time.Now()
	defer func() { k.purged.Observe(n, time.Since(t0), err) }()
	return k.purge(ctx, olderThan, purgeloop.Unpaced)
}

// PurgeExpired deletes the rows older than the retention (see Purge).
func (k *Core) PurgeExpired(ctx context.Context) (int64, error) {
	return k.Purge(ctx, time.Now().Add(-k.c.Retention))
}

// autoPurge is the automatic purge: PurgeExpired, paced.
func (k *Core) autoPurge(ctx context.Context) (n int64, err error) {
	t0 := time.Now()
	defer func() { k.purged.Observe(n, time.Since(t0), err) }()
	return k.purge(ctx, time.Now().Add(-k.c.Retention), k.c.Pace)
}

// purge is Purge without the counting; see purgeloop.Batches for pace.
// On PostgreSQL each batch returns the recording time it stopped at, and
// the next one starts there (see inboxsql.Build).
func (k *Core) purge(ctx context.Context, olderThan time.Time, pace int) (int64, error) {
	var from time.Time
	return purgeloop.Batches(ctx, k.c.PurgeBatch, pace, func(ctx context.Context) (int64, error) {
		t0 := time.Now()
		var n int64
		var err error
		if k.c.SQL.Postgres {
			var last sql.NullTime
			err = k.c.DB.QueryRow(ctx, k.c.SQL.Purge, olderThan, k.c.PurgeBatch, from).Scan(&n, &last)
			if err == nil && last.Valid {
				from = last.Time
			}
		} else {
			n, err = k.c.DB.Exec(ctx, k.c.SQL.Purge, k.c.SQL.Time(olderThan), k.c.PurgeBatch)
		}
		k.c.Count.Observe(time.Since(t0), err)
		if err != nil {
			return 0, fmt.Errorf("inbox: purge: %w", err)
		}
		return n, nil
	})
}
