package idempotency

import (
	"fmt"
	"log/slog"
	"time"
)

// Defaults of the zero Options fields; the backends apply the same ones
// (internal/claimkit.Normalize, checked against normalize by a test).
const (
	defaultClaimTTL      = 5 * time.Minute
	defaultRetention     = 7 * 24 * time.Hour
	defaultMaxKeyLength  = 256
	defaultPurgeInterval = time.Hour
	defaultPurgeBatch    = 1000
)

// Clock tells the time. Stores that keep time themselves (memory, SQLite)
// read it from Options.Clock, so tests can move time without sleeping.
// Stores whose server keeps time (Redis PX, PostgreSQL now()) ignore it.
type Clock interface {
	Now() time.Time
}

// ClockFunc adapts a function to the Clock interface.
type ClockFunc func() time.Time

// Now returns f().
func (f ClockFunc) Now() time.Time { return f() }

// systemClock is the real clock, the default.
type systemClock struct{}

func (systemClock) Now() time.Time { return time.Now() }

// Options configures a store. The zero value means every default.
type Options struct {
	// ClaimTTL is the lease of a claim: a claim not confirmed, released or
	// renewed within it lapses, and the next TryClaim takes the key over.
	// Zero means 5 minutes.
	ClaimTTL time.Duration
	// Retention is how long a confirmation is remembered; after it the key
	// is forgotten and can be claimed again. Zero means 7 days.
	Retention time.Duration
	// Clock is read by stores that keep time themselves. Nil means the
	// system clock.
	Clock Clock
	// MaxKeyLength is the longest storage key kept verbatim, in bytes. A
	// storage key is the namespace (with '%' and '/' escaped as %25 and
	// %2F), a '/' and the ID; a longer one, or one that is not valid UTF-8
	// or holds a NUL byte, is stored as "sha256:" and the 64 hex digits of
	// its SHA-256, never truncated. Zero means 256.
	MaxKeyLength int
	// PurgeInterval is how often the SQL stores (sqlitestore, pgstore,
	// mysqlstore) delete their expired rows on their own, from a goroutine
	// the constructor starts and Close stops; the first purge runs one
	// interval after the store is made, and after each batch it waits as
	// long as the batch took (nine times as long on SQLite, whose one
	// write lock every claim needs). Zero means every hour; a negative
	// value turns it off (call Purge yourself then). It is on by default
	// because an expired row is already dead: a claim or a confirmation
	// past its expiry is invisible to TryClaim and IsConfirmed, so
	// deleting it changes no answer and only keeps the table small. An
	// hour adds at most an hour of traffic to a table that holds
	// Retention's worth (seven days by default). redisstore ignores it:
	// Redis expires its keys itself. The memory store ignores it too: it
	// drops expired entries when their key is touched, and its Purge frees
	// the rest.
	PurgeInterval time.Duration
	// PurgeBatch bounds the rows one purge statement deletes, in the
	// automatic purge and in a call of Purge with batch 0. Each batch is a
	// short statement of its own, so a claim or a confirmation waits at
	// most for one batch. Zero means 1000, a batch that takes a few
	// milliseconds; a negative value is an error.
	PurgeBatch int
	// Logger receives what the URL constructors (pgstore.Open,
	// redisstore.Open, Open) log once when they open a connection (the
	// effective PostgreSQL TLS mode, and a warning when TLS does not
	// verify the server) and a warning for each automatic purge that
	// failed. Nil logs nothing.
	Logger *slog.Logger
}

// PurgeStats are the counters of the purges of expired rows a store or an
// inbox ran since it was made: the automatic ones (Options.PurgeInterval)
// and the calls of its Purge methods.
type PurgeStats struct {
	// Runs is the number of purges that ended, failed ones included.
	Runs uint64
	// Rows is the number of rows they deleted.
	Rows uint64
	// Errors is the number of purges that ended with an error, a purge
	// cut short by Close or by its caller's context included.
	Errors uint64
	// Time is the time the purges took, summed.
	Time time.Duration
}

// validate reports a negative ClaimTTL, Retention, MaxKeyLength or PurgeBatch as
// ErrOptions. Zero values are valid (they mean defaults).
func (o Options) validate() error {
	switch {
	case o.ClaimTTL < 0:
		return fmt.Errorf("%w: negative ClaimTTL %v", ErrOptions, o.ClaimTTL)
	case o.Retention < 0:
		return fmt.Errorf("%w: negative Retention %v", ErrOptions, o.Retention)
	case o.MaxKeyLength < 0:
		return fmt.Errorf("%w: negative MaxKeyLength %d", ErrOptions, o.MaxKeyLength)
	case o.PurgeBatch < 0:
		return fmt.Errorf("%w: negative PurgeBatch %d", ErrOptions, o.PurgeBatch)
	}
	return nil
}

// normalize validates o and replaces every zero field by its default.
func (o Options) normalize() (Options, error) {
	if err := o.validate(); err != nil {
		return o, err
	}
	if o.ClaimTTL == 0 {
		o.ClaimTTL = defaultClaimTTL
	}
	if o.Retention == 0 {
		o.Retention = defaultRetention
	}
	if o.Clock == nil {
		o.Clock = systemClock{}
	}
	if o.MaxKeyLength == 0 {
		o.MaxKeyLength = defaultMaxKeyLength
	}
	if o.PurgeInterval == 0 {
		o.PurgeInterval = defaultPurgeInterval
	}
	if o.PurgeBatch == 0 {
		o.PurgeBatch = defaultPurgeBatch
	}
	return o, nil
}

// Backlog is what a store or an inbox holds at one moment, as its Backlog
// method samples it. Each sample is one or two short statements that read
// an index or the database's statistics, never a scan of the table, so
// it may be taken at every metrics scrape.
type Backlog struct {
	// Held is the number of claims taken and neither confirmed nor
	// released whose lease has not run out. An inbox holds none: its keys
	// live inside the effect's transaction.
	Held int64
	// OldestHeld is how long the oldest of them has been held, 0 with
	// none. Growing without bound is a handler that never ends.
	OldestHeld time.Duration
	// Rows is the number of keys kept: held, confirmed, and expired ones
	// not yet purged. Where counting would scan the table (PostgreSQL,
	// MySQL) it is the database's own estimate.
	Rows int64
	// OldestRow is the age of the oldest key kept, 0 with none. With the
	// purge running it stays near Retention plus PurgeInterval; growing
	// past that is a purge that does not run or does not keep up.
	OldestRow time.Duration
}
