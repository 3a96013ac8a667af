package idempotency

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/acemq/msgaudit/internal/testkit/testwait"
)

type ctxKey struct{}

func TestBatchContext(t *testing.T) {
	t.Parallel()
	parent, cancel := context.WithCancel(context.WithValue(context.Background(), ctxKey{}, "v"))
	cancel() // a caller's cancellation does not reach the batch
	c := new(batchContext)
	c.reset(parent, time.Now().Add(time.Hour))
	if err := c.Err(); err != nil {
		t.Fatalf("Err of a live batch context = %v", err)
	}
	if v := c.Value(ctxKey{}); v != "v" {
		t.Fatalf("Value = %v, want the first request's", v)
	}
	if d, ok := c.Deadline(); !ok || time.Until(d) < 59*time.Minute {
		t.Fatalf("Deadline = %v, %v", d, ok)
	}
	if !c.finish() {
		t.Fatal("a context nobody asked Done of is not reusable")
	}
	if err := c.Err(); !errors.Is(err, context.Canceled) {
		t.Fatalf("Err after finish = %v, want Canceled", err)
	}

	// Done, once asked for, closes at the deadline, and the context is not
	// reused.
	c.reset(parent, time.Now().Add(20*time.Millisecond))
	done := c.Done()
	select {
	case <-done:
		t.Fatal("Done closed before the deadline")
	default:
	}
	testwait.Recv(t, done, testwait.Long, "Done at the deadline")
	if err := c.Err(); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Err after the deadline = %v", err)
	}
	if c.finish() {
		t.Fatal("a context whose Done was handed out is reusable")
	}

	// finish closes a Done handed out before the deadline.
	c = new(batchContext)
	c.reset(parent, time.Now().Add(time.Hour))
	done = c.Done()
	c.finish()
	testwait.Recv(t, done, testwait.Long, "Done after finish")
	if err := c.Err(); !errors.Is(err, context.Canceled) {
		t.Fatalf("Err after finish = %v", err)
	}

	// A deadline already past: Err and Done say so at once.
	c = new(batchContext)
	c.reset(parent, time.Now().Add(-time.Second))
	if err := c.Err(); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Err past the deadline = %v", err)
	}
	testwait.Recv(t, c.Done(), testwait.Long, "Done past the deadline")
}
