package receiver

import "context"

// Observer watches the deliveries a Receiver processes (Config.Observer):
// package oteltrace implements it with OpenTelemetry spans. The receiver
// calls it and the Observation it returns on the goroutine of the Process
// call they observe, never with a receiver lock held.
type Observer interface {
	// Start is called first by Process, before the delivery's key is
	// derived. It returns the context the rest of the delivery runs in
	// (its selectors, its handler and its settlement see it) and the
	// Observation of this delivery; a nil Observation observes nothing
	// more of it.
	Start(ctx context.Context, m *Message) (context.Context, Observation)
}

// Observation receives the events of one delivery, in the order they
// happen: Selected for each selector asked, Handle when the handler runs,
// Settle when the accepted selectors are settled, and End once, last.
// Handle and Settle are each called at most once, Handle only when the
// handler runs and Settle only when a selector accepted with a Settle
// function. A duplicate handed to the handler (DuplicateDeliver) is
// settled before its handler runs.
type Observation interface {
	// Selected reports what the selector named name decided (its
	// Decision), or the error it returned instead.
	Selected(name string, d Decision, err error)
	// Handle is called when the handler is about to run, once a handler
	// slot is free, with the handler's context. It returns the context
	// the handler gets (derived from ctx) and a function that Process
	// calls with the handler's error when it returns; a panic is an error
	// wrapping ErrPanic.
	Handle(ctx context.Context) (context.Context, func(err error))
	// Settle is called before the accepted selectors are settled with s
	// (a store's confirm or release, the inbox's commit or rollback). It
	// returns the context the settlement runs in (derived from ctx) and a
	// function that Process calls with the settlement's first error when
	// it is done.
	Settle(ctx context.Context, s Settlement) (context.Context, func(err error))
	// End is called once, last, with the Result that Process returns.
	End(res Result)
}
