package receiver

import (
	"context"

	"github.com/acemq/msgaudit/internal/admission"
)

// Handler slots. Process takes a slot after every selector accepted (so
// the claims of waiting deliveries are already made, and a
// group-committing store sees them together) and gives it back when the
// handler returns, before settling (so the confirms of finished handlers
// do not hold slots). Config.Handlers gives a Receiver its own gate; a
// transport adds one per subscription, and an abandon signal, on the
// context of the deliveries it processes (package internal/admission): a
// delivery whose handler has not started when that signal closes, or
// whose context ends while it waits for a slot, does not start it. Its
// decisions are settled Abandoned (the audit bit rolled back, the claim
// released) and Process returns Requeue with Ran false, Reason
// "abandoned" and an Err wrapping ErrAbandoned; the transport sends
// nothing for it and the broker delivers it again.

// admit takes the slots of ctx's gate and the receiver's gate, in that
// order, and checks the abandon signal; on success the caller runs the
// handler and then calls leave with the returned gate.
func (r *Receiver) admit(ctx context.Context) (*admission.Gate, error) {
	gate, abandon, ok := admission.From(ctx)
	if !ok {
		return nil, r.gate.Acquire(ctx, nil)
	}
	if err := gate.Acquire(ctx, abandon); err != nil {
		return nil, err
	}
	if err := r.gate.Acquire(ctx, abandon); err != nil {
		gate.Release()
		return nil, err
	}
	if abandon != nil {
		select {
		case <-abandon:
			// Both were free, or freed in the same instant the abandon
			// signal came: start nothing after it.
			r.gate.Release()
			gate.Release()
			return nil, ErrAbandoned
		default:
		}
	}
	return gate, nil
}

// leave releases what admit took.
func (r *Receiver) leave(g *admission.Gate) {
	r.gate.Release()
	g.Release()
}
