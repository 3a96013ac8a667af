package consumerkit

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/acemq/msgaudit/receiver"
)

// ErrClosed is returned by Redial.Get once Close has been called.
var ErrClosed = errors.New("publisher closed")

// Redial holds the one connection of a publisher: dialled at the first
// Get, dropped by the caller when it breaks, and dialled again at the
// next Get. Failed dials are spaced by Backoff: a Get within the wait
// after a failure returns that failure at once instead of dialling, so a
// caller retrying in a loop does not hammer a broker that is down. Its
// methods are safe for concurrent use; one dial runs at a time and a
// waiting Get gives up when its ctx ends.
type Redial[C comparable] struct {
	dial    func(context.Context) (C, error)
	close   func(C)
	backoff receiver.Backoff

	sem     chan struct{} // held while the fields below are used
	cur     C
	has     bool
	fails   int
	retryAt time.Time
	lastErr error
	closed  bool
}

// NewRedial returns a Redial over dial and close (which closes a dropped
// connection) with failed dials spaced by backoff.Delay.
func NewRedial[C comparable](dial func(context.Context) (C, error), close func(C), backoff receiver.Backoff) *Redial[C] {
	return &Redial[C]{dial: dial, close: close, backoff: backoff, sem: make(chan struct{}, 1)}
}

func (r *Redial[C]) lock(ctx context.Context) error {
	select {
	case r.sem <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (r *Redial[C]) unlock() { <-r.sem }

// Get returns the current connection, dialling one when there is none.
func (r *Redial[C]) Get(ctx context.Context) (C, error) {
	var zero C
	if err := r.lock(ctx); err != nil {
		return zero, err
	}
	defer r.unlock()
	switch {
	case r.closed:
		return zero, ErrClosed
	case r.has:
		return r.cur, nil
	case r.fails > 0 && time.Now().Before(r.retryAt):
		return zero, fmt.Errorf("not redialling for %v after %d failed dials: %w", time.Until(r.retryAt).Round(time.Millisecond), r.fails, r.lastErr)
	}
	c, err := r.dial(ctx)
	if err != nil {
		if ctx.Err() == nil {
			r.fails++
			r.retryAt = time.Now().Add(r.backoff.Delay(r.fails - 1))
			r.lastErr = err
		}
		return zero, err
	}
	r.cur, r.has, r.fails = c, true, 0
	return c, nil
}

// Drop closes c and forgets it if it is still the current connection, so
// that the next Get dials. A connection already dropped is left alone.
func (r *Redial[C]) Drop(c C) {
	r.sem <- struct{}{}
	defer r.unlock()
	if r.has && r.cur == c {
		var zero C
		r.cur, r.has = zero, false
		r.close(c)
	}
}

// Close closes the current connection, if any; every later Get returns
// ErrClosed. It waits for a dial in progress.
func (r *Redial[C]) Close() {
	r.sem <- struct{}{}
	defer r.unlock()
	r.closed = true
	if r.has {
		var zero C
		r.close(r.cur)
		r.cur, r.has = zero, false
	}
}
