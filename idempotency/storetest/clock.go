package storetest

import (
	"sync/atomic"
	"time"
)

// FakeClock is an idempotency.Clock that moves only when told to. It is
// safe for concurrent use.
type FakeClock struct {
	ns atomic.Int64
}

// NewFakeClock returns a clock standing at start.
func NewFakeClock(start time.Time) *FakeClock {
	c := &FakeClock{}
	c.ns.Store(start.UnixNano())
	return c
}

// Now returns the clock's time.
func (c *FakeClock) Now() time.Time { return time.Unix(0, c.ns.Load()) }

// Advance moves the clock forward by d.
func (c *FakeClock) Advance(d time.Duration) { c.ns.Add(int64(d)) }
