package receiver

import (
	"context"
	"strconv"
	"time"
)

// Selector decides whether a delivery is new work (Spring Integration's
// MessageSelector, extended with settlement). The receiver runs its
// selectors in order, cheapest first (the in-memory audit), then durable
// ones (the idempotency store, a metadata store):
//
//   - Accept: not a duplicate as far as this selector knows; the next
//     selector is asked, and when every selector accepted, the handler runs.
//     An accepting selector may have recorded something (a set audit bit, a
//     store claim); it returns a Settle function the receiver calls exactly
//     once with how the delivery ended.
//   - Reject: a duplicate of finished work. Later selectors are not asked
//     (this is how the store round trip is skipped when memory already
//     knows); earlier accepting selectors are settled with Completed,
//     because finished work is what they should remember; the duplicate
//     policy then decides (acknowledge, dead-letter, deliver marked, hook).
//   - Defer: the outcome is unknown (the original is still in flight here
//     or on another machine, or a store cannot answer). Earlier accepting
//     selectors are settled with Abandoned and the delivery is requeued —
//     never acknowledged.
//
// An error from Select counts as Defer (requeue), except an error wrapping
// ErrBadKey, which dead-letters: a key that can never be checked would
// otherwise loop forever.
//
// Select must not block indefinitely: it may wait (for example for an
// in-flight original), but only as long as ctx allows. Implementations must
// be safe for concurrent use; a single delivery's Select and Settle are
// called from one goroutine, Renew from another while the handler runs.
//
// Writing a selector (for example the metadata-store selector): take the key
// from m.IdempotencyKey() (or a key function of your own), make the decision
// atomically (put-if-absent / compare-and-set), and return a Settle that
// undoes the recorded state on Failed and Abandoned and keeps it on
// Completed. Reasons are short and stable: they label metrics and logs.
type Selector interface {
	// Name identifies the selector in Result.Trace and logs ("memory",
	// "store", "metadata").
	Name() string
	// Select decides about m.
	Select(ctx context.Context, m *Message) (Decision, error)
}

// Verdict is a selector's answer.
type Verdict uint8

const (
	// Accept means new work as far as the selector knows.
	Accept Verdict = iota + 1
	// Reject means a duplicate of finished (confirmed) work.
	Reject
	// Defer means the outcome is unknown: hand the delivery back.
	Defer
)

// String returns "accept", "reject" or "defer".
func (v Verdict) String() string {
	switch v {
	case Accept:
		return "accept"
	case Reject:
		return "reject"
	case Defer:
		return "defer"
	}
	return "verdict(" + strconv.Itoa(int(v)) + ")"
}

// Settlement is how an accepted delivery ended, passed to Decision.Settle.
type Settlement uint8

const (
	// Completed: the work is finished — the handler succeeded, or a later
	// selector knows it was finished before. Keep what was recorded
	// (confirm a claim, remember the key as done).
	Completed Settlement = iota + 1
	// Failed: the handler failed or panicked, or a later settlement failed;
	// the delivery will be retried or dead-lettered. Undo what was recorded
	// (roll back the audit bit, release the claim).
	Failed
	// Abandoned: the handler did not run because a later selector deferred.
	// Undo what was recorded.
	Abandoned
)

// String returns "completed", "failed" or "abandoned".
func (s Settlement) String() string {
	switch s {
	case Completed:
		return "completed"
	case Failed:
		return "failed"
	case Abandoned:
		return "abandoned"
	}
	return "settlement(" + strconv.Itoa(int(s)) + ")"
}

// Decision is what a selector said about one delivery.
type Decision struct {
	// Verdict is Accept, Reject or Defer.
	Verdict Verdict
	// Reason is a short stable label: "audit", "store", "in-flight", ...
	// For Reject it names the tier that knew ("audit", "store",
	// "in-flight" when the original was in flight and then completed).
	Reason string
	// Detail describes the selector's view for Result.Trace, e.g. "new",
	// "claimed", "too-old".
	Detail string
	// Settle, when non-nil on Accept, is called exactly once with how the
	// delivery ended. A Completed settlement that returns an error turns
	// the outcome into a requeue: Settle(Failed) is then called on the same
	// decision (a release attempt) and on every earlier one.
	Settle func(ctx context.Context, s Settlement) error
	// Renew, when non-nil on Accept, is called every RenewEvery while the
	// handler runs (a lease renewal). An error wrapping
	// idempotency.ErrClaimLost cancels the handler's context.
	Renew func(ctx context.Context) error
	// RenewEvery is the renewal period; <= 0 disables renewal.
	RenewEvery time.Duration
	// Context, when non-nil on Accept, derives the handler's context from
	// the delivery's: the receiver calls it once, after every selector
	// accepted and before the handler runs, in selector order. It is how a
	// selector hands the handler something it opened for this delivery
	// (the transactional inbox passes its open database transaction as a
	// context value). It must not block and must return a context derived
	// from its argument; it is not called for deliveries the handler sees
	// without every selector accepting (DuplicateDeliver, MissingKeyProcess).
	Context func(ctx context.Context) context.Context
}

// SelectorFunc adapts a stateless function to Selector: it never records
// anything, so its decisions carry no Settle.
type SelectorFunc struct {
	// Label is returned by Name.
	Label string
	// Func decides.
	Func func(ctx context.Context, m *Message) (Verdict, string, error)
}

// Name returns f.Label.
func (f SelectorFunc) Name() string { return f.Label }

// Select calls f.Func.
func (f SelectorFunc) Select(ctx context.Context, m *Message) (Decision, error) {
	v, reason, err := f.Func(ctx, m)
	if err != nil {
		return Decision{}, err
	}
	return Decision{Verdict: v, Reason: reason, Detail: v.String()}, nil
}
