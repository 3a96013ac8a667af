package idempotency

import (
	"fmt"
	"log/slog"
	"time"
)

// Defaults applied by Options.WithDefaults.
const (
	// DefaultClaimTTL is how long a claim lasts unless renewed.
	DefaultClaimTTL = 5 * time.Minute
	// DefaultRetention is how long a confirmation is remembered.
	DefaultRetention = 7 * 24 * time.Hour
	// DefaultMaxKeyLength is the longest storage key (see Key.StorageKey)
	// kept as is; longer keys are hashed.
	DefaultMaxKeyLength = 256
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
	// Zero means DefaultClaimTTL.
	ClaimTTL time.Duration
	// Retention is how long a confirmation is remembered; after it the key
	// is forgotten and can be claimed again. Zero means DefaultRetention.
	Retention time.Duration
	// Clock is read by stores that keep time themselves. Nil means the
	// system clock.
	Clock Clock
	// MaxKeyLength is the longest storage key kept verbatim; longer keys
	// are stored as their SHA-256 (see Key.StorageKey). Zero means
	// DefaultMaxKeyLength.
	MaxKeyLength int
	// Logger receives what the URL constructors (pgstore.Open,
	// redisstore.Open, Open) log once when they open a connection: the
	// effective PostgreSQL TLS mode, and a warning when TLS does not verify
	// the server. Nil logs nothing.
	Logger *slog.Logger
}

// WithDefaults returns o with every zero field replaced by its default.
// Negative values are kept, so Validate still reports them.
func (o Options) WithDefaults() Options {
	if o.ClaimTTL == 0 {
		o.ClaimTTL = DefaultClaimTTL
	}
	if o.Retention == 0 {
		o.Retention = DefaultRetention
	}
	if o.Clock == nil {
		o.Clock = systemClock{}
	}
	if o.MaxKeyLength == 0 {
		o.MaxKeyLength = DefaultMaxKeyLength
	}
	return o
}

// Validate reports a negative ClaimTTL, Retention or MaxKeyLength as
// ErrOptions. Zero values are valid (they mean defaults).
func (o Options) Validate() error {
	switch {
	case o.ClaimTTL < 0:
		return fmt.Errorf("%w: negative ClaimTTL %v", ErrOptions, o.ClaimTTL)
	case o.Retention < 0:
		return fmt.Errorf("%w: negative Retention %v", ErrOptions, o.Retention)
	case o.MaxKeyLength < 0:
		return fmt.Errorf("%w: negative MaxKeyLength %d", ErrOptions, o.MaxKeyLength)
	}
	return nil
}

// Normalize validates o and fills in defaults: Validate, then WithDefaults.
// Backends call it in their constructors.
func (o Options) Normalize() (Options, error) {
	if err := o.Validate(); err != nil {
		return o, err
	}
	return o.WithDefaults(), nil
}
