package claimkit

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/acemq/msgaudit/idempotency"
)

// Guard is what every network store checks first and says the same way:
// that it is open and the caller's context alive, a key's storage form,
// the claim a settlement names, and the errors of its calls. Its zero
// value is an open guard of a store named "" with no key prefix.
type Guard struct {
	// Name is the backend's name in errors: "idempotency: <Name> <op>: …".
	Name string
	// Prefix comes before every storage key (a Redis key prefix).
	Prefix string
	// MaxKeyLength is the longest key stored verbatim (the Options').
	MaxKeyLength int
	// Explain adds what a driver's error means (nil: nothing).
	Explain func(error) error

	closed atomic.Bool
}

// Begin returns ctx's error or idempotency.ErrClosed, checked before any
// I/O.
func (g *Guard) Begin(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if g.closed.Load() {
		return idempotency.ErrClosed
	}
	return nil
}

// Close marks the store closed and reports whether it was open (true for
// the first call only).
func (g *Guard) Close() bool { return !g.closed.Swap(true) }

// StorageKey validates key and returns its storage form: the prefix and
// the key, hashed beyond MaxKeyLength.
func (g *Guard) StorageKey(key idempotency.Key) (string, error) {
	if err := key.Validate(); err != nil {
		return "", err
	}
	return g.Prefix + StorageKey(key, g.MaxKeyLength), nil
}

// Key runs Begin and returns key's storage form.
func (g *Guard) Key(ctx context.Context, key idempotency.Key) (string, error) {
	if err := g.Begin(ctx); err != nil {
		return "", err
	}
	return g.StorageKey(key)
}

// Owner runs Begin, validates c's key and token and returns the storage
// key. A claim without a token was never held: idempotency.ErrClaimLost.
func (g *Guard) Owner(ctx context.Context, c idempotency.Claim) (string, error) {
	sk, err := g.Key(ctx, c.Key)
	if err != nil {
		return "", err
	}
	if c.Token == "" {
		return "", idempotency.ErrClaimLost
	}
	return sk, nil
}

// Error wraps a driver's error of operation op. When ctx ended, the
// context's error is the cause, so callers can match it with errors.Is.
func (g *Guard) Error(ctx context.Context, op string, err error) error {
	if g.Explain != nil {
		err = g.Explain(err)
	}
	return fmt.Errorf("idempotency: %s %s: %w", g.Name, op, CtxCause(ctx, err))
}

// CtxCause returns err with ctx's error as its cause when ctx ended (see
// CtxDone) and err does not already say so, else err.
func CtxCause(ctx context.Context, err error) error {
	if ctxErr := CtxDone(ctx); ctxErr != nil && !errors.Is(err, ctxErr) {
		return fmt.Errorf("%w (%v)", ctxErr, err)
	}
	return err
}

// CtxDone returns ctx's error, or context.DeadlineExceeded when ctx's
// deadline has passed but its timer has not fired yet: a client that sets
// the deadline on the socket can see its I/O time out a moment before
// ctx.Err() turns non-nil, and the caller should still learn that its
// deadline, not the server, ended the call.
func CtxDone(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if d, ok := ctx.Deadline(); ok && !time.Now().Before(d) {
		return context.DeadlineExceeded
	}
	return nil
}

// Micros converts d to whole microseconds (the SQL stores' resolution),
// rounding up, and at least 1.
func Micros(d time.Duration) int64 {
	return max(int64((d+time.Microsecond-1)/time.Microsecond), 1)
}
