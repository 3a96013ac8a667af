// Package claimkit holds what the idempotency backends share to implement
// idempotency.Store and that is no part of its public contract: fresh owner
// tokens (NewToken) and TryClaim for a store that offers only an atomic
// two-state claim (TwoState, TryClaim).
package claimkit

import (
	"context"
	"crypto/rand"
	"encoding/hex"

	"github.com/acemq/msgaudit/idempotency"
)

// NewToken returns a fresh owner token: 16 bytes from crypto/rand as 32
// lowercase hex digits. Two claims never share a token in practice, so a
// holder whose lease lapsed cannot act on its successor's claim.
func NewToken() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go 1.24+); it crashes the program instead.
	return hex.EncodeToString(b[:])
}

// TwoState is what a store needs to get idempotency.Store.TryClaim from
// TryClaim: an atomic claim and a read of the confirmed state.
type TwoState interface {
	// Claim takes a lease on key; ok is false with a nil error when the key
	// is claimed by someone else or confirmed.
	Claim(ctx context.Context, key idempotency.Key) (c idempotency.Claim, ok bool, err error)
	// IsConfirmed reports whether key is confirmed and still retained.
	IsConfirmed(ctx context.Context, key idempotency.Key) (bool, error)
}

// TryClaim implements idempotency.Store.TryClaim for a store that only
// offers the two-state contract: it calls Claim and, when the claim is refused,
// IsConfirmed. A new key costs one round trip, a refused one two.
//
// The two calls are not atomic, and both races between them resolve safely:
//
//   - The holder confirms between the refused Claim and IsConfirmed: the key
//     reads as confirmed and the answer is AlreadyConfirmed, which is true —
//     the work is finished, so acknowledging the redelivery is correct.
//   - The holder's claim expires or is released (or a confirmation's
//     retention ends) in between: the key reads as not confirmed and the
//     answer is InProgress although the key is now free. The caller hands
//     the delivery back and the next attempt claims the key; this costs a
//     retry, never a message.
//
// Neither race can produce a false Claimed (only the atomic Claim says
// Claimed) or a false AlreadyConfirmed (only a confirmation that exists says
// AlreadyConfirmed). Calling IsConfirmed first would not help: the key could
// be confirmed, released or expire between the calls just the same, and a
// new key would cost two round trips instead of one.
//
// Any error is returned with a zero Outcome and Claim.
func TryClaim(ctx context.Context, s TwoState, key idempotency.Key) (idempotency.Outcome, idempotency.Claim, error) {
	c, ok, err := s.Claim(ctx, key)
	if err != nil {
		return 0, idempotency.Claim{}, err
	}
	if ok {
		return idempotency.Claimed, c, nil
	}
	confirmed, err := s.IsConfirmed(ctx, key)
	if err != nil {
		return 0, idempotency.Claim{}, err
	}
	if confirmed {
		return idempotency.AlreadyConfirmed, idempotency.Claim{}, nil
	}
	return idempotency.InProgress, idempotency.Claim{}, nil
}
