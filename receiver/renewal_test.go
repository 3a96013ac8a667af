package receiver_test

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/acemq/msgaudit/idempotency"
	"github.com/acemq/msgaudit/receiver"
)

// gateSelector accepts every delivery, but only after its gate opens: a
// stand-in for whatever a claimed delivery waits on before its handler
// runs (a free handler slot).
type gateSelector struct {
	entered chan string
	gate    chan struct{}
}

func newGateSelector() *gateSelector {
	return &gateSelector{entered: make(chan string, 16), gate: make(chan struct{})}
}

func (s *gateSelector) Name() string { return "gate" }

func (s *gateSelector) Select(ctx context.Context, m *receiver.Message) (receiver.Decision, error) {
	s.entered <- m.Key
	select {
	case <-s.gate:
	case <-ctx.Done():
		return receiver.Decision{}, ctx.Err()
	}
	return receiver.Decision{Verdict: receiver.Accept, Detail: "open"}, nil
}

// TestRenewalClaimAhead: a claim made ahead of its handler is renewed
// while the delivery waits, not only while the handler runs: after a wait
// well past the claim's original lease the claim is still held, nobody
// else can take the key, and the confirm succeeds.
func TestRenewalClaimAhead(t *testing.T) {
	t.Parallel()
	gate := newGateSelector()
	g := newRig(t, true, func(c *receiver.Config) {
		c.RenewEvery = time.Millisecond
		c.Selectors = []receiver.Selector{gate}
	})
	m := msg("ID:ahead:1")
	key := idempotency.Key{Namespace: queue, ID: m.Key}
	done := make(chan receiver.Result, 1)
	ran := make(chan error, 1)
	go func() {
		done <- g.r.Process(bg, m, func(ctx context.Context, m *receiver.Message) error {
			ran <- ctx.Err()
			return nil
		})
	}()
	recv(t, gate.entered, testWait, "the delivery reaching the gate after its claim")
	// Move the store's clock past the original lease in steps, each
	// followed by a renewal: the lease is extended from each step.
	for step := range 4 {
		n := g.store.callCount("renew")
		if !eventually(testWait, func() bool { return g.store.callCount("renew") > n }) {
			t.Fatalf("step %d: timed out after %v: a renewal while the delivery waited did not happen", step, testWait)
		}
		g.clock.Advance(40 * time.Second) // the fake store's TTL is one minute
	}
	n := g.store.callCount("renew")
	if !eventually(testWait, func() bool { return g.store.callCount("renew") > n }) {
		t.Fatalf("timed out after %v: the last renewal did not happen", testWait)
	}
	if st := g.store.state(key); st != "claimed" {
		t.Fatalf("after 160s of waiting the claim is %s, want still claimed", st)
	}
	if out, _, err := g.store.TryClaim(bg, key); err != nil || out != idempotency.InProgress {
		t.Fatalf("another consumer's TryClaim = %v, %v; want in-progress", out, err)
	}
	close(gate.gate)
	if err, _ := recv(t, ran, testWait, "the handler running"); err != nil {
		t.Fatalf("handler context: %v", err)
	}
	res, _ := recv(t, done, testWait, "Process returning")
	if res.Action != receiver.Ack || g.store.state(key) != "confirmed" {
		t.Fatalf("after the wait: %+v, store %s; want ack and confirmed", res, g.store.state(key))
	}
	stopped := g.store.callCount("renew")
	time.Sleep(5 * time.Millisecond)
	if got := g.store.callCount("renew"); got != stopped {
		t.Fatalf("renewals went on after the settle: %d → %d", stopped, got)
	}
}

// TestRenewalClaimLostWhileWaiting: when the claim is lost while the
// delivery waits for its handler, the handler starts with its context
// already cancelled, ErrClaimLost the cause, and the delivery is not
// acknowledged.
func TestRenewalClaimLostWhileWaiting(t *testing.T) {
	t.Parallel()
	gate := newGateSelector()
	g := newRig(t, true, func(c *receiver.Config) {
		c.RenewEvery = time.Millisecond
		c.Selectors = []receiver.Selector{gate}
	})
	m := msg("ID:ahead:2")
	done := make(chan receiver.Result, 1)
	causes := make(chan error, 1)
	go func() {
		done <- g.r.Process(bg, m, func(ctx context.Context, m *receiver.Message) error {
			causes <- context.Cause(ctx)
			return ctx.Err()
		})
	}()
	recv(t, gate.entered, testWait, "the delivery reaching the gate")
	n := g.store.callCount("renew")
	g.store.stealClaim(idempotency.Key{Namespace: queue, ID: m.Key}) // another consumer took the key
	if !eventually(testWait, func() bool { return g.store.callCount("renew") > n }) {
		t.Fatalf("timed out after %v: the renewal that finds the claim lost did not happen", testWait)
	}
	lostAt := g.store.callCount("renew")
	time.Sleep(5 * time.Millisecond)
	if got := g.store.callCount("renew"); got != lostAt {
		t.Fatalf("renewals went on after the claim was lost: %d → %d", lostAt, got)
	}
	close(gate.gate)
	if cause, _ := recv(t, causes, testWait, "the handler running"); !errors.Is(cause, idempotency.ErrClaimLost) {
		t.Fatalf("handler context cause = %v, want ErrClaimLost", cause)
	}
	if res, _ := recv(t, done, testWait, "Process returning"); res.Action == receiver.Ack {
		t.Fatalf("a delivery whose claim was lost was acknowledged: %+v", res)
	}
}

// TestRenewalDefaultPeriod: with the default period (half the claim's
// remaining lease) on a store keeping real time, a claim held for longer
// than its TTL before the handler runs is still held and confirms.
func TestRenewalDefaultPeriod(t *testing.T) {
	t.Parallel()
	const ttl = 2 * time.Second
	mem := memStore(t, idempotency.Options{ClaimTTL: ttl})
	defer mem.Close()
	gate := newGateSelector()
	r, err := receiver.New(receiver.Config{Store: mem, Selectors: []receiver.Selector{gate}})
	if err != nil {
		t.Fatal(err)
	}
	m := msg("ID:ahead:3")
	done := make(chan receiver.Result, 1)
	go func() { done <- r.Process(bg, m, okHandler) }()
	recv(t, gate.entered, testWait, "the delivery reaching the gate")
	time.Sleep(ttl + ttl/2) // past the original lease: only renewals keep it
	key := idempotency.Key{Namespace: queue, ID: m.Key}
	if out, _, err := mem.TryClaim(bg, key); err != nil || out != idempotency.InProgress {
		t.Fatalf("TryClaim after waiting 1.5 TTL = %v, %v; want in-progress (renewed)", out, err)
	}
	close(gate.gate)
	if res, _ := recv(t, done, testWait, "Process returning"); res.Action != receiver.Ack {
		t.Fatalf("Process = %+v, want ack", res)
	}
	if ok, err := mem.IsConfirmed(bg, key); err != nil || !ok {
		t.Fatalf("confirmed = %v, %v", ok, err)
	}
}

// TestRenewalManyHeld: many claims held at once are all renewed, by the
// selector's one renewer.
func TestRenewalManyHeld(t *testing.T) {
	t.Parallel()
	const n = 50
	gate := newGateSelector()
	gate.entered = make(chan string, n)
	g := newRig(t, true, func(c *receiver.Config) {
		c.RenewEvery = time.Millisecond
		c.Selectors = []receiver.Selector{gate}
	})
	var wg sync.WaitGroup
	results := make([]receiver.Result, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i] = g.r.Process(bg, msg("ID:many:"+strconv.Itoa(i)), okHandler)
		}()
	}
	for range n {
		recv(t, gate.entered, testWait, "a delivery reaching the gate")
	}
	base := g.store.callCount("renew")
	if !eventually(testWait, func() bool { return g.store.callCount("renew") >= base+3*n }) {
		t.Fatalf("timed out after %v: %d renewals of %d held claims did not happen", testWait, 3*n, n)
	}
	close(gate.gate)
	wg.Wait()
	for i, res := range results {
		if res.Action != receiver.Ack {
			t.Fatalf("delivery %d: %+v", i, res)
		}
	}
}
