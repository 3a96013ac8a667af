package receiver

import (
	"context"
	"fmt"
)

// Gate bounds how many handlers run at once. Process acquires a slot after
// every selector accepted (so the claims of waiting deliveries are already
// made, and a group-committing store sees them together) and releases it
// when the handler returns, before settling (so the confirms of finished
// handlers do not hold slots). Config.Handlers gives a Receiver its own
// gate; WithAdmission adds another for the deliveries processed with one
// context (a transport's subscription). A nil *Gate admits everything. A
// Gate is safe for concurrent use.
type Gate struct {
	slots chan struct{}
}

// NewGate returns a gate admitting n handlers at once; n <= 0 returns nil
// (no bound).
func NewGate(n int) *Gate {
	if n <= 0 {
		return nil
	}
	return &Gate{slots: make(chan struct{}, n)}
}

// Cap returns the number of slots (0 for a nil gate: no bound).
func (g *Gate) Cap() int {
	if g == nil {
		return 0
	}
	return cap(g.slots)
}

// acquire takes a slot, waiting while all are held, unless ctx ends or
// abandon closes first.
func (g *Gate) acquire(ctx context.Context, abandon <-chan struct{}) error {
	if g == nil {
		return nil
	}
	select {
	case g.slots <- struct{}{}:
		return nil
	default:
	}
	select {
	case g.slots <- struct{}{}:
		return nil
	case <-abandon:
		return ErrAbandoned
	case <-ctx.Done():
		return fmt.Errorf("%w: %w", ErrAbandoned, context.Cause(ctx))
	}
}

// release returns a slot.
func (g *Gate) release() {
	if g != nil {
		<-g.slots
	}
}

// admission is the context value WithAdmission sets.
type admission struct {
	gate    *Gate
	abandon <-chan struct{}
}

type admissionKey struct{}

// WithAdmission returns a context for Process that admits deliveries to
// their handlers through gate as well as through the Receiver's own gate
// (Config.Handlers), and abandons them when abandon is closed: a delivery
// whose handler has not started by then does not start it. Its decisions
// are settled Abandoned (the audit bit rolled back, the claim released) and
// Process returns Requeue with Ran false, Reason "abandoned" and an Err
// wrapping ErrAbandoned; the transport sends nothing for it and the broker
// delivers it again. A delivery whose context ends while it waits for a
// slot is abandoned the same way. Either argument may be nil.
//
// Transports use it per subscription and connection: gate bounds a
// subscription's handlers when one Receiver serves several, and abandon
// closes when the connection is lost or a graceful stop begins, so that
// deliveries claimed ahead of their handlers leave at once.
func WithAdmission(ctx context.Context, gate *Gate, abandon <-chan struct{}) context.Context {
	return context.WithValue(ctx, admissionKey{}, &admission{gate: gate, abandon: abandon})
}

// admit takes the slots of ctx's gate and the receiver's gate, in that
// order, and checks the abandon signal; on success the caller runs the
// handler and then calls leave with the returned gate.
func (r *Receiver) admit(ctx context.Context) (*Gate, error) {
	var a *admission
	if v := ctx.Value(admissionKey{}); v != nil {
		a = v.(*admission)
	}
	if a == nil {
		return nil, r.gate.acquire(ctx, nil)
	}
	if err := a.gate.acquire(ctx, a.abandon); err != nil {
		return nil, err
	}
	if err := r.gate.acquire(ctx, a.abandon); err != nil {
		a.gate.release()
		return nil, err
	}
	if a.abandon != nil {
		select {
		case <-a.abandon:
			// Both were free, or freed in the same instant the abandon
			// signal came: start nothing after it.
			r.gate.release()
			a.gate.release()
			return nil, ErrAbandoned
		default:
		}
	}
	return a.gate, nil
}

// leave releases what admit took.
func (r *Receiver) leave(g *Gate) {
	r.gate.release()
	g.release()
}
