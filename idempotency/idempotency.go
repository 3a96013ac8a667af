package idempotency

import (
	"context"
	"errors"
	"time"
)

// Key names one unit of work: a namespace (a consumer group or a queue) and
// a message id, as Fency keys by queue name and message id.
type Key struct {
	Namespace string
	ID        string
}

// Outcome is the answer of TryClaim.
type Outcome uint8

const (
	// Claimed means the caller now holds the claim and must run the work,
	// then Confirm on success or Release on failure.
	Claimed Outcome = iota + 1
	// AlreadyConfirmed means the work is finished: a redelivery is a
	// duplicate that may be acknowledged without running the work.
	AlreadyConfirmed
	// InProgress means someone holds a live claim and has not confirmed:
	// the outcome is unknown, so the delivery must not be acknowledged; hand
	// it back and retry later.
	InProgress
)

// String returns "claimed", "already-confirmed" or "in-progress".
func (o Outcome) String() string {
	switch o {
	case Claimed:
		return "claimed"
	case AlreadyConfirmed:
		return "already-confirmed"
	case InProgress:
		return "in-progress"
	}
	return "outcome(invalid)"
}

// Claim is a held lease on a key. Token identifies the holder; Expires is
// when the lease lapses unless renewed.
type Claim struct {
	Key     Key
	Token   string
	Expires time.Time
}

// Sentinel errors shared by every Store.
var (
	// ErrClaimLost is returned by Confirm, Release and Renew when the caller
	// no longer holds the claim (its lease expired and another caller took
	// it, or it was released). Nothing is changed.
	ErrClaimLost = errors.New("idempotency: claim lost")
	// ErrInvalidKey is returned for an empty namespace-and-id or a key a
	// backend cannot store.
	ErrInvalidKey = errors.New("idempotency: invalid key")
)

// Store remembers claimed and finished work. Implementations are safe for
// concurrent use. A backend error or timeout is always returned as an error,
// never as a verdict.
type Store interface {
	// TryClaim claims key if it is free (never claimed, released, or its
	// claim or confirmation expired); otherwise it reports whether the work
	// is finished (AlreadyConfirmed) or held by someone (InProgress). It is
	// the one way to take a claim. The returned Claim is valid only with
	// Claimed.
	TryClaim(ctx context.Context, key Key) (Outcome, Claim, error)
	// Confirm records the work as finished, ending the claim. The
	// confirmation is remembered for the retention period.
	Confirm(ctx context.Context, c Claim) error
	// Release gives the claim back without confirming, so the next
	// delivery can claim the key.
	Release(ctx context.Context, c Claim) error
	// Renew extends the lease of a held claim by the claim TTL.
	Renew(ctx context.Context, c Claim) (Claim, error)
	// IsConfirmed reports whether key is confirmed and still retained.
	IsConfirmed(ctx context.Context, key Key) (bool, error)
	// Close releases the store's resources.
	Close() error
}
