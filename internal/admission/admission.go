// Package admission bounds how many handlers run at once and lets a
// transport abandon the deliveries whose handler has not started. The
// receiver reads the Gate and the abandon signal a transport put on a
// delivery's context with With; the transports make one Gate per
// subscription (its Concurrency) and close the abandon signal when a
// connection is lost or a graceful stop begins.
package admission

import (
	"context"
	"errors"
	"fmt"
)

// ErrAbandoned is the error of a delivery abandoned before its handler
// started: its context ended, or its abandon signal closed, while it
// waited for a slot. The receiver exports it as receiver.ErrAbandoned.
var ErrAbandoned = errors.New("receiver: abandoned before the handler started")

// Gate bounds how many handlers run at once. A nil *Gate admits
// everything. A Gate is safe for concurrent use.
type Gate struct {
	slots chan struct{}
}

// New returns a gate admitting n handlers at once; n <= 0 returns nil
// (no bound).
func New(n int) *Gate {
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

// Acquire takes a slot, waiting while all are held, unless ctx ends or
// abandon closes first: then it returns an error wrapping ErrAbandoned
// (and ctx's cause, when ctx ended).
func (g *Gate) Acquire(ctx context.Context, abandon <-chan struct{}) error {
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

// Release returns a slot.
func (g *Gate) Release() {
	if g != nil {
		<-g.slots
	}
}

// admission is the context value With sets.
type admission struct {
	gate    *Gate
	abandon <-chan struct{}
}

type key struct{}

// With returns a context whose deliveries are admitted to their handlers
// through gate as well as through the receiver's own gate, and abandoned
// when abandon is closed. Either argument may be nil.
func With(ctx context.Context, gate *Gate, abandon <-chan struct{}) context.Context {
	return context.WithValue(ctx, key{}, &admission{gate: gate, abandon: abandon})
}

// From returns what With put on ctx; ok is false when With was not used.
func From(ctx context.Context) (gate *Gate, abandon <-chan struct{}, ok bool) {
	a, _ := ctx.Value(key{}).(*admission)
	if a == nil {
		return nil, nil, false
	}
	return a.gate, a.abandon, true
}
