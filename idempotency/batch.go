package idempotency

import "context"

// ClaimResult is one key's answer in a TryClaimBatch: the same Outcome and
// Claim TryClaim would return, or the error TryClaim would return for that
// key alone (ErrInvalidKey for a key the backend cannot store).
type ClaimResult struct {
	// Outcome is the key's answer; zero when Err is set.
	Outcome Outcome
	// Claim is the held claim; valid only when Outcome is Claimed.
	Claim Claim
	// Err is this key's own failure, the others' answers still stand.
	Err error
}

// BatchStore is a Store that can try-claim, confirm and release many keys
// in one round trip or one transaction. Each key's answer is exactly what
// the single-key method would have answered had the calls run one after
// the other in slice order; a batch that fails as a whole (the backend is
// unreachable, the transaction did not commit) returns an error and changes
// nothing a caller may rely on: every key of a failed TryClaimBatch is
// unclaimed, still held by its previous holder, or — when the batch took
// effect but its answer was lost on the way back — held by a claim no
// caller has, which lapses at the end of its lease exactly as after a
// single TryClaim whose answer was lost (the key's deliveries are deferred
// until then, never acknowledged); and a failed ConfirmBatch confirms none
// of its claims as far as the caller knows (it retries or requeues them,
// never acknowledges them).
//
// A key may appear more than once in one TryClaimBatch: the first
// occurrence is answered as TryClaim would, later ones as TryClaim would
// after it (InProgress, since the first holds the claim).
type BatchStore interface {
	Store
	// TryClaimBatch try-claims keys[i] into res[i]; len(res) must equal
	// len(keys). A non-nil error means the whole batch failed and res is
	// undefined.
	TryClaimBatch(ctx context.Context, keys []Key, res []ClaimResult) error
	// ConfirmBatch confirms claims[i], reporting its own failure
	// (ErrClaimLost) in errs[i]; len(errs) must equal len(claims). A
	// non-nil error means the whole batch failed.
	ConfirmBatch(ctx context.Context, claims []Claim, errs []error) error
	// ReleaseBatch releases claims[i], reporting its own failure in
	// errs[i]; len(errs) must equal len(claims). A non-nil error means the
	// whole batch failed.
	ReleaseBatch(ctx context.Context, claims []Claim, errs []error) error
}
