// Package testwait bounds the waits in msgaudit's tests. Each helper waits
// for something to happen and, when it has not happened after the given
// duration, fails the test with a message naming what did not happen, so a
// test whose goroutine never finishes fails within its deadline instead of
// hanging until the package's timeout. The helpers never assert how long
// anything took: durations are generous limits, not expectations.
package testwait

import (
	"context"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"
)

// Long is the deadline most waits in the tests use: generous, since the
// tests run on slow and shared machines.
const Long = 30 * time.Second

// TB is the part of a test the helpers need; *testing.T, *testing.B and
// *testing.F have it. Fatalf must end the calling goroutine (the testing
// package's Fatalf does); a TB whose Fatalf returns gets the helper's zero
// result.
type TB interface {
	Helper()
	Fatalf(format string, args ...any)
}

// Recv receives one value from ch. After d without one it fails t with
// "timed out after d: what did not happen". ok is false when ch was closed.
// Call it from the goroutine running the test, as Fatalf requires.
func Recv[T any](t TB, ch <-chan T, d time.Duration, what string) (v T, ok bool) {
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

// Group waits for wg. After d with wg not done it fails t, saying what did
// not finish. The goroutine doing the waiting outlives a failed test; it
// ends when wg does.
func Group(t TB, wg *sync.WaitGroup, d time.Duration, what string) {
	t.Helper()
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	Recv(t, done, d, what)
}

// Until polls cond every millisecond until it returns true. After d with
// cond still false it fails t, saying what did not happen.
func Until(t TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v: %s did not happen", d, what)
			return
		}
		time.Sleep(time.Millisecond)
	}
}

// Context returns a context for a test's blocking calls that ends after d,
// so a call stuck on a service fails with context.DeadlineExceeded instead
// of hanging. It is cancelled when t's cleanups run (after the cleanups
// registered later than the call, before those registered earlier), so
// cleanups that need a context use their own.
func Context(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// Goroutines returns the stacks of the running goroutines whose stack
// mentions fn, a function as the runtime prints it (for example
// "purgeloop.(*Loop).run").
func Goroutines(fn string) []string {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	var found []string
	for _, g := range strings.Split(string(buf), "\n\n") {
		if strings.Contains(g, fn) {
			found = append(found, g)
		}
	}
	return found
}

// NoGoroutine waits until no goroutine runs fn (see Goroutines): a
// goroutine-leak check for a component whose Close must end its
// goroutines. After d it fails t with the stacks of those still there.
// Call it from the goroutine running the test.
func NoGoroutine(t TB, d time.Duration, fn string) {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		left := Goroutines(fn)
		if len(left) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v: %d goroutine(s) still run %s:\n%s", d, len(left), fn, strings.Join(left, "\n\n"))
			return
		}
		time.Sleep(time.Millisecond)
	}
}
