package receiver

import (
	"context"
	"errors"
)

// AsError converts the result into the error a handler built with
// Receiver.Wrap returns:
// nil for an Ack of processed work (or of a duplicate the handler saw under
// DuplicateDeliver); ErrDuplicate for an Ack of a duplicate that was not
// processed; an *ActionError (matching ErrRequeue or ErrDeadLetter with
// errors.Is, and the handler's error) for Requeue and DeadLetter.
func (res Result) AsError() error {
	switch res.Action {
	case Ack:
		if res.Duplicate && !res.Ran {
			return ErrDuplicate
		}
		return nil
	case DeadLetter, Requeue:
		return &ActionError{Result: res}
	}
	return &ActionError{Result: Result{Action: Requeue, Reason: "invalid-action", Err: res.Err}}
}

// ActionError carries a Requeue or DeadLetter Result out of a Wrap'd
// handler. errors.Is matches ErrRequeue or ErrDeadLetter, and the handler's
// error.
type ActionError struct {
	Result Result
}

// Error describes the action, reason and cause.
func (e *ActionError) Error() string {
	s := "receiver: " + e.Result.Action.String() + " (" + e.Result.Reason + ")"
	if e.Result.Err != nil {
		s += ": " + e.Result.Err.Error()
	}
	return s
}

// Unwrap returns the action's sentinel and the cause.
func (e *ActionError) Unwrap() []error {
	sentinel := ErrRequeue
	if e.Result.Action == DeadLetter {
		sentinel = ErrDeadLetter
	}
	if e.Result.Err == nil {
		return []error{sentinel}
	}
	return []error{sentinel, e.Result.Err}
}

// ActionOf maps a Wrap'd handler's error to the transport's action: nil and
// ErrDuplicate → Ack; an error matching ErrDeadLetter → DeadLetter; any
// other error (ErrRequeue, or an error from an unwrapped handler) →
// Requeue. A transport never acknowledges on an error it does not know.
func ActionOf(err error) Action {
	switch {
	case err == nil, errors.Is(err, ErrDuplicate):
		return Ack
	case errors.Is(err, ErrDeadLetter):
		return DeadLetter
	}
	return Requeue
}

// ResultOf extracts the Result carried by a Wrap'd handler's error.
func ResultOf(err error) (Result, bool) {
	var ae *ActionError
	if errors.As(err, &ae) {
		return ae.Result, true
	}
	return Result{}, false
}

// Wrap returns a Handler that runs h through r's pipeline, for any
// consumer: the returned handler returns nil (acknowledge), ErrDuplicate
// (acknowledge, don't process) or an error matching ErrRequeue or
// ErrDeadLetter; ActionOf maps any of them to the transport's action (see
// Result.AsError).
func (r *Receiver) Wrap(h Handler) Handler {
	return func(ctx context.Context, m *Message) error {
		return r.Process(ctx, m, h).AsError()
	}
}
