package idempotency

import (
	"context"
	"sync"
	"time"
)

// batchContext is the context of one batch call: the values of the first
// request's context, no cancellation by any caller, and a deadline
// (GroupOptions.Timeout). It is context.WithTimeout(context.WithoutCancel(
// parent), timeout) made cheaper: its Done channel, and the timer that
// closes it, exist only once the backend asks for Done, so a backend that
// only calls Err (the memory store) costs the batch no allocation, and a
// flusher reuses the same batchContext for its next batch when nobody
// asked for Done. finish ends it like the cancel function of
// context.WithTimeout: Done (if made) closes and Err reports
// context.Canceled. A backend must not keep the context past its call
// (none does; a reused context would show the next batch's values).
type batchContext struct {
	values   context.Context
	deadline time.Time

	mu    sync.Mutex
	done  chan struct{} // nil until Done is called
	timer *time.Timer
	err   error
}

var _ context.Context = (*batchContext)(nil)

// Deadline returns the batch call's deadline.
func (c *batchContext) Deadline() (time.Time, bool) { return c.deadline, true }

// Done returns a channel closed at the deadline or when the batch call
// is over.
func (c *batchContext) Done() <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.done == nil {
		c.done = make(chan struct{})
		if c.err != nil {
			close(c.done)
		} else if d := time.Until(c.deadline); d <= 0 {
			c.err = context.DeadlineExceeded
			close(c.done)
		} else {
			c.timer = time.AfterFunc(d, func() { c.end(context.DeadlineExceeded) })
		}
	}
	return c.done
}

// Err returns context.DeadlineExceeded after the deadline,
// context.Canceled after finish, nil before.
func (c *batchContext) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err == nil && !time.Now().Before(c.deadline) {
		c.err = context.DeadlineExceeded
		if c.done != nil {
			close(c.done)
		}
	}
	return c.err
}

// Value returns the first request's context's value for key.
func (c *batchContext) Value(key any) any {
	c.mu.Lock()
	v := c.values
	c.mu.Unlock()
	return v.Value(key)
}

// end records err as the context's error unless it has one, closing Done.
func (c *batchContext) end(err error) {
	c.mu.Lock()
	if c.err == nil {
		c.err = err
		if c.done != nil {
			close(c.done)
		}
	}
	c.mu.Unlock()
}

// finish ends the context after its batch call and reports whether it
// can be reused for the next batch: true when nobody asked for Done, so
// nobody can be waiting on this context.
func (c *batchContext) finish() (reusable bool) {
	c.end(context.Canceled)
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.timer != nil {
		c.timer.Stop()
	}
	return c.done == nil
}

// reset prepares a reusable context for the next batch.
func (c *batchContext) reset(values context.Context, deadline time.Time) {
	c.mu.Lock()
	c.values, c.deadline, c.err, c.timer = values, deadline, nil, nil
	c.mu.Unlock()
}
