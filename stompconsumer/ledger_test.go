package stompconsumer

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/acemq/msgaudit/receiver"
)

// ledger is the effect a handler applies: one entry per message, keyed by
// the producer-chosen body ("n"), like a table with a unique constraint.
// A second apply of one message is recorded as a double.
type ledger struct {
	mu      sync.Mutex
	applied map[string]int
	doubles []string
	calls   atomic.Int64  // handler invocations
	fails   atomic.Int64  // injected failures
	delay   time.Duration // each handler call sleeps a random time up to delay
}

func newLedger() *ledger { return &ledger{applied: make(map[string]int)} }

// apply records the message; it reports false for a double apply.
func (l *ledger) apply(id string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.applied[id]++
	if l.applied[id] > 1 {
		l.doubles = append(l.doubles, id)
		return false
	}
	return true
}

func (l *ledger) count() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.applied)
}

// handler applies m to the ledger; with probability failP (decided per
// call) it fails before applying, and with panicP it panics.
func (l *ledger) handler(failP, panicP float64) receiver.Handler {
	return func(ctx context.Context, m *receiver.Message) error {
		l.calls.Add(1)
		if l.delay > 0 {
			time.Sleep(rand.N(l.delay))
		}
		r := rand.Float64()
		switch {
		case r < panicP:
			l.fails.Add(1)
			panic("injected panic")
		case r < panicP+failP:
			l.fails.Add(1)
			return errors.New("injected failure")
		}
		l.apply(string(m.Body))
		return nil
	}
}

// verify checks exactly-once: every id 0..n-1 applied once, none twice.
func (l *ledger) verify(t *testing.T, n int) {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	missing := 0
	var first []string
	for i := range n {
		if l.applied[fmt.Sprint(i)] == 0 {
			missing++
			if len(first) < 10 {
				first = append(first, fmt.Sprint(i))
			}
		}
	}
	if missing > 0 {
		t.Errorf("lost: %d of %d messages never applied (first: %v)", missing, n, first)
	}
	if len(l.doubles) > 0 {
		t.Errorf("applied twice: %d (first: %v)", len(l.doubles), l.doubles[:min(10, len(l.doubles))])
	}
	if len(l.applied) > n {
		t.Errorf("ledger holds %d entries for %d messages", len(l.applied), n)
	}
}

// waitFor polls cond until it holds; after d it fails the test, saying
// what did not happen.
func waitFor(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	if !eventually(d, cond) {
		t.Fatalf("timed out after %v waiting for %s", d, what)
	}
}

// eventually polls cond until it holds (true) or d passes (false); for
// goroutines that must not call t.Fatal and for waits whose failure the
// test explains itself.
func eventually(d time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(20 * time.Millisecond)
	}
	return true
}

// recv receives one value from ch; after d it fails the test, saying what
// did not happen. ok is false when ch was closed.
func recv[T any](t *testing.T, ch <-chan T, d time.Duration, what string) (v T, ok bool) {
	t.Helper()
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case v, ok = <-ch:
		return v, ok
	case <-timer.C:
		t.Fatalf("timed out after %v waiting for %s", d, what)
		return v, false
	}
}

// blockUntil is a handler's wait for the test to release it: true when
// release is closed, false (after failing the test) when ctx ends or d
// passes first, so a test that fails early never leaves a handler, and
// with it the consumer's stop, blocked for good.
func blockUntil(ctx context.Context, t *testing.T, release <-chan struct{}, d time.Duration, what string) bool {
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-release:
		return true
	case <-ctx.Done():
		t.Errorf("a handler's context ended while it waited for %s", what)
	case <-timer.C:
		t.Errorf("a handler waited %v for %s", d, what)
	}
	return false
}
