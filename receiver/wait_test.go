package receiver_test

import (
	"context"
	"sync"
	"testing"
	"time"
)

// testWait bounds every wait in this package's tests. A wait that runs out
// fails the test with what did not happen, instead of hanging until the
// package timeout.
const testWait = 10 * time.Second

// eventually polls cond until it holds (true) or d passes (false); for
// handlers and other goroutines that must not call t.Fatal.
func eventually(d time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(time.Millisecond)
	}
	return true
}

// recv receives one value from ch; after d it fails the test, saying what
// was not received. ok is false when ch was closed.
func recv[T any](t testing.TB, ch <-chan T, d time.Duration, what string) (v T, ok bool) {
	t.Helper()
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case v, ok = <-ch:
		return v, ok
	case <-timer.C:
		t.Fatalf("timed out after %v: %s did not happen", d, what)
		return v, false
	}
}

// waitGroup waits for wg; after d it fails the test, saying what did not
// finish.
func waitGroup(t testing.TB, wg *sync.WaitGroup, d time.Duration, what string) {
	t.Helper()
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	recv(t, done, d, what)
}

// blockUntil is a handler's wait for the test to release it: it returns
// true when release is closed and false (after failing the test) when ctx
// ends or d passes first, so a test that fails early never leaves a
// handler blocked for good.
func blockUntil(ctx context.Context, t testing.TB, release <-chan struct{}, d time.Duration, what string) bool {
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-release:
		return true
	case <-ctx.Done():
		t.Errorf("handler's context ended before %s", what)
	case <-timer.C:
		t.Errorf("timed out after %v in a handler: %s did not happen", d, what)
	}
	return false
}
