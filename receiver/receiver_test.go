package receiver_test

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/acemq/msgaudit/idempotency"
	"github.com/acemq/msgaudit/receiver"
)

const queue = "/queue/orders"

type rig struct {
	audit *fakeAudit
	store *fakeStore
	clock *manualClock
	r     *receiver.Receiver
	cfg   receiver.Config
}

// newRig builds a receiver over a fake audit and, when withStore, a fake
// store; mod adjusts the Config.
func newRig(t *testing.T, withStore bool, mod func(*receiver.Config)) *rig {
	t.Helper()
	g := &rig{audit: newFakeAudit(), clock: newClock()}
	g.cfg = receiver.Config{Audit: g.audit, MaxAttempts: 3, Clock: g.clock}
	if withStore {
		g.store = newFakeStore(g.clock)
		g.cfg.Store = g.store
	}
	if mod != nil {
		mod(&g.cfg)
	}
	if g.cfg.Store == nil && g.cfg.Inbox == nil && len(g.cfg.Selectors) == 0 {
		g.cfg.MemoryOnly = true
	}
	r, err := receiver.New(g.cfg)
	if err != nil {
		t.Fatal(err)
	}
	g.r = r
	return g
}

// restart replaces the receiver by a new one with a fresh audit (a crash:
// memory lost, the store kept).
func (g *rig) restart(t *testing.T) {
	t.Helper()
	g.audit = newFakeAudit()
	g.cfg.Audit = g.audit
	r, err := receiver.New(g.cfg)
	if err != nil {
		t.Fatal(err)
	}
	g.r = r
}

func msg(key string) *receiver.Message {
	return &receiver.Message{Key: key, Destination: queue, Consumer: "c1"}
}

// counter is a handler that counts runs and returns the scripted errors in
// order (nil after the script ends).
type counter struct {
	mu     sync.Mutex
	runs   int
	script []error
}

func (c *counter) handle(ctx context.Context, m *receiver.Message) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.runs++
	if len(c.script) > 0 {
		err := c.script[0]
		c.script = c.script[1:]
		return err
	}
	return nil
}

func (c *counter) n() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.runs
}

var bg = context.Background()

func TestPipelinePaths(t *testing.T) {
	t.Parallel()
	boom := errors.New("boom")
	type step struct {
		m       *receiver.Message
		h       receiver.Handler // nil: the counter
		action  receiver.Action
		reason  string // "" = don't care; prefix match
		dup     bool
		ran     bool
		attempt int // 0 = don't care
	}
	cases := []struct {
		name   string
		store  bool
		mod    func(*receiver.Config)
		setup  func(t *testing.T, g *rig)
		steps  []step
		runs   int
		verify func(t *testing.T, g *rig)
	}{
		{name: "new then duplicate from memory (no store)", steps: []step{
			{m: msg("ID:p:1"), action: receiver.Ack, ran: true},
			{m: msg("ID:p:1"), action: receiver.Ack, reason: "audit", dup: true},
		}, runs: 1},
		{name: "new then duplicate from memory skips the store", store: true, steps: []step{
			{m: msg("ID:p:1"), action: receiver.Ack, ran: true},
			{m: msg("ID:p:1"), action: receiver.Ack, reason: "audit", dup: true},
		}, runs: 1, verify: func(t *testing.T, g *rig) {
			if n := g.store.callCount("tryclaim"); n != 1 {
				t.Errorf("store TryClaim calls = %d, want 1 (two-tier)", n)
			}
			if s := g.store.state(idempotency.Key{Namespace: queue, ID: "ID:p:1"}); s != "confirmed" {
				t.Errorf("store state %s", s)
			}
		}},
		{name: "handler error rolls back bit and releases claim, retry runs", store: true,
			setup: func(t *testing.T, g *rig) {},
			steps: []step{
				{m: msg("ID:p:1"), h: failing(boom), action: receiver.Requeue, reason: "handler-error", ran: true, attempt: 1},
				{m: msg("ID:p:1"), action: receiver.Ack, ran: true, attempt: 2},
			}, runs: 1, verify: func(t *testing.T, g *rig) {
				if g.audit.rollbacks != 1 {
					t.Errorf("rollbacks = %d", g.audit.rollbacks)
				}
			}},
		{name: "panic is recovered and requeued", store: true, steps: []step{
			{m: msg("ID:p:1"), h: func(context.Context, *receiver.Message) error { panic("kaboom") },
				action: receiver.Requeue, reason: "panic", ran: true},
			{m: msg("ID:p:1"), action: receiver.Ack, ran: true},
		}, runs: 1},
		{name: "max attempts dead-letters with the count", store: true, steps: []step{
			{m: msg("ID:p:1"), h: failing(boom), action: receiver.Requeue, attempt: 1, ran: true},
			{m: msg("ID:p:1"), h: failing(boom), action: receiver.Requeue, attempt: 2, ran: true},
			{m: msg("ID:p:1"), h: failing(boom), action: receiver.DeadLetter, reason: "max-attempts: 3 attempts, last handler-error: boom", attempt: 3, ran: true},
		}, verify: func(t *testing.T, g *rig) {
			if s := g.store.state(idempotency.Key{Namespace: queue, ID: "ID:p:1"}); s != "free" {
				t.Errorf("dead-lettered key left %s in the store", s)
			}
		}},
		{name: "transport attempt count is honoured", steps: []step{
			{m: &receiver.Message{Key: "ID:p:1", Destination: queue, Attempt: 3}, h: failing(boom),
				action: receiver.DeadLetter, attempt: 3, ran: true},
		}},
		{name: "restart: duplicate known by the store", store: true,
			setup: func(t *testing.T, g *rig) {
				if res := g.r.Process(bg, msg("ID:p:1"), okHandler); res.Action != receiver.Ack {
					t.Fatal(res)
				}
				g.restart(t)
			},
			steps: []step{{m: msg("ID:p:1"), action: receiver.Ack, reason: "store", dup: true}}},
		{name: "claim held elsewhere: requeue, never ack", store: true,
			setup: func(t *testing.T, g *rig) { g.store.stealClaim(idempotency.Key{Namespace: queue, ID: "ID:p:1"}) },
			steps: []step{{m: msg("ID:p:1"), action: receiver.Requeue, reason: "in-flight", dup: true}},
			verify: func(t *testing.T, g *rig) {
				if g.audit.has("c1", queue, "ID:p:1") {
					t.Error("audit bit kept after a deferred delivery")
				}
			}},
		{name: "store down: requeue and roll back", store: true,
			setup: func(t *testing.T, g *rig) { g.store.setFail("tryclaim", 1) },
			steps: []step{
				{m: msg("ID:p:1"), action: receiver.Requeue, reason: "store-error"},
				{m: msg("ID:p:1"), action: receiver.Ack, ran: true},
			}, runs: 1},
		{name: "confirm fails: rollback, release, requeue", store: true,
			setup: func(t *testing.T, g *rig) { g.store.setFail("confirm", 1) },
			steps: []step{
				{m: msg("ID:p:1"), action: receiver.Requeue, reason: "confirm-error", ran: true},
				{m: msg("ID:p:1"), action: receiver.Ack, ran: true},
			}, runs: 2, verify: func(t *testing.T, g *rig) {
				if n := g.store.callCount("release"); n != 1 {
					t.Errorf("release calls = %d", n)
				}
				if g.r.Metrics().Snapshot().SettleErrors != 1 {
					t.Error("settle error not counted")
				}
			}},
		{name: "too old without a store fails open", steps: []step{
			{m: msg("old:1"), action: receiver.Ack, ran: true},
		}, runs: 1, verify: func(t *testing.T, g *rig) {
			if g.r.Metrics().Snapshot().TooOldFailOpen != 1 {
				t.Error("fail-open not counted")
			}
		}},
		{name: "too old with a store: the store decides", store: true,
			setup: func(t *testing.T, g *rig) {
				g.r.Process(bg, msg("old:1"), okHandler)
				g.restart(t)
			},
			steps: []step{{m: msg("old:1"), action: receiver.Ack, reason: "store", dup: true}}},
		{name: "malformed key without a store dead-letters", steps: []step{
			{m: msg("not-an-id"), action: receiver.DeadLetter, reason: "malformed-key"},
		}},
		{name: "malformed key with a store: store only", store: true, steps: []step{
			{m: msg("not-an-id"), action: receiver.Ack, ran: true},
			{m: msg("not-an-id"), action: receiver.Ack, dup: true, reason: "audit"},
		}, runs: 1, verify: func(t *testing.T, g *rig) {
			if g.r.Metrics().Snapshot().AuditBypass != 1 {
				t.Error("bypass not counted")
			}
		}},
		{name: "invalid store key dead-letters", store: true, steps: []step{
			{m: msg("x\x00y"), action: receiver.DeadLetter, reason: "malformed-key"},
		}},
		{name: "missing key dead-letters", steps: []step{
			{m: msg(""), action: receiver.DeadLetter, reason: "missing-key"},
		}},
		{name: "missing key processed by policy", mod: func(c *receiver.Config) { c.MissingKey = receiver.MissingKeyProcess },
			steps: []step{{m: msg(""), action: receiver.Ack, ran: true}}, runs: 1},
		{name: "header key", mod: func(c *receiver.Config) { c.KeyFunc = receiver.HeaderKey("x-idem") },
			steps: []step{
				{m: &receiver.Message{Key: "ID:a:1", Destination: queue, Headers: map[string]string{"x-idem": "K:1"}}, action: receiver.Ack, ran: true},
				{m: &receiver.Message{Key: "ID:b:7", Destination: queue, Headers: map[string]string{"x-idem": "K:1"}}, action: receiver.Ack, dup: true},
				{m: &receiver.Message{Key: "ID:b:8", Destination: queue}, action: receiver.DeadLetter, reason: "missing-key"},
			}, runs: 1},
		{name: "key function error dead-letters", mod: func(c *receiver.Config) {
			c.KeyFunc = func(*receiver.Message) (string, error) { return "", errors.New("no body key") }
		}, steps: []step{{m: msg("ID:p:1"), action: receiver.DeadLetter, reason: "missing-key"}}},
		{name: "topic copies are per consumer", store: true, steps: []step{
			{m: &receiver.Message{Key: "ID:p:1", Destination: "/topic/t", Consumer: "s1"}, action: receiver.Ack, ran: true},
			{m: &receiver.Message{Key: "ID:p:1", Destination: "/topic/t", Consumer: "s2"}, action: receiver.Ack, ran: true},
			{m: &receiver.Message{Key: "ID:p:1", Destination: "/topic/t", Consumer: "s1"}, action: receiver.Ack, dup: true},
		}, runs: 2},
		{name: "queue copies are shared by consumers", steps: []step{
			{m: &receiver.Message{Key: "ID:p:1", Destination: queue, Consumer: "s1"}, action: receiver.Ack, ran: true},
			{m: &receiver.Message{Key: "ID:p:1", Destination: queue, Consumer: "s2"}, action: receiver.Ack, dup: true},
		}, runs: 1},
		{name: "restored snapshot with unknown outcome asks the store", store: true,
			setup: func(t *testing.T, g *rig) {
				// The bit is set (a snapshot taken while the delivery ran),
				// but the work never finished.
				g.audit.Check("c1", queue, "ID:p:1")
			},
			steps: []step{{m: msg("ID:p:1"), action: receiver.Ack, ran: true}}, runs: 1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			g := newRig(t, tc.store, tc.mod)
			if tc.setup != nil {
				tc.setup(t, g)
			}
			c := &counter{}
			for i, s := range tc.steps {
				h := s.h
				if h == nil {
					h = c.handle
				}
				res := g.r.Process(bg, s.m, h)
				if res.Action != s.action || res.Duplicate != s.dup || res.Ran != s.ran ||
					!strings.HasPrefix(res.Reason, s.reason) || (s.attempt != 0 && res.Attempt != s.attempt) {
					t.Fatalf("step %d: got %+v; want action=%v reason=%q dup=%v ran=%v attempt=%d",
						i, res, s.action, s.reason, s.dup, s.ran, s.attempt)
				}
			}
			if c.n() != tc.runs {
				t.Errorf("counter handler ran %d times, want %d", c.n(), tc.runs)
			}
			if tc.verify != nil {
				tc.verify(t, g)
			}
			if n := receiver.InFlightCount(g.r); n != 0 {
				t.Errorf("%d entries left in flight", n)
			}
		})
	}
}

func okHandler(context.Context, *receiver.Message) error { return nil }

func failing(err error) receiver.Handler {
	return func(context.Context, *receiver.Message) error { return err }
}

func TestDuplicatePolicies(t *testing.T) {
	t.Parallel()
	var hooked atomic.Value
	cases := []struct {
		name    string
		mod     func(*receiver.Config)
		action  receiver.Action
		reason  string
		ran     bool
		check   func(t *testing.T, m *receiver.Message)
		wrapErr error
	}{
		{name: "drop", action: receiver.Ack, reason: "audit", wrapErr: receiver.ErrDuplicate},
		{name: "dead-letter", mod: func(c *receiver.Config) { c.Duplicates = receiver.DuplicateDeadLetter },
			action: receiver.DeadLetter, reason: "duplicate:audit", wrapErr: receiver.ErrDeadLetter},
		{name: "deliver marked", mod: func(c *receiver.Config) { c.Duplicates = receiver.DuplicateDeliver },
			action: receiver.Ack, reason: "audit", ran: true,
			check: func(t *testing.T, m *receiver.Message) {
				if !m.Duplicate || m.Header("duplicate") != "true" {
					t.Errorf("not marked: %+v", m)
				}
			}},
		{name: "hook", mod: func(c *receiver.Config) {
			c.Duplicates = receiver.DuplicateHook
			c.OnDuplicate = func(_ context.Context, m *receiver.Message, reason string) { hooked.Store(m.Key + "/" + reason) }
		}, action: receiver.Ack, reason: "audit", wrapErr: receiver.ErrDuplicate,
			check: func(t *testing.T, m *receiver.Message) {
				if v, _ := hooked.Load().(string); v != "ID:p:1/audit" {
					t.Errorf("hook saw %q", v)
				}
			}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			g := newRig(t, true, tc.mod)
			var seen []bool
			h := func(_ context.Context, m *receiver.Message) error { seen = append(seen, m.Duplicate); return nil }
			if res := g.r.Process(bg, msg("ID:p:1"), h); res.Action != receiver.Ack || res.Duplicate {
				t.Fatal(res)
			}
			m := msg("ID:p:1")
			res := g.r.Process(bg, m, h)
			if res.Action != tc.action || res.Reason != tc.reason || !res.Duplicate || res.Ran != tc.ran {
				t.Fatalf("duplicate: %+v", res)
			}
			if tc.check != nil {
				tc.check(t, m)
			}
			if want := 1 + map[bool]int{true: 1}[tc.ran]; len(seen) != want || seen[0] {
				t.Fatalf("handler calls %v", seen)
			}
			// The same through Wrap.
			err := g.r.Wrap(h)(bg, msg("ID:p:1"))
			if tc.wrapErr == nil && err != nil || tc.wrapErr != nil && !errors.Is(err, tc.wrapErr) {
				t.Fatalf("Wrap: %v, want %v", err, tc.wrapErr)
			}
			if got := receiver.ActionOf(err); got != tc.action {
				t.Fatalf("ActionOf = %v", got)
			}
		})
	}
}

func TestNoPolicyAcksInFlight(t *testing.T) {
	t.Parallel()
	for _, p := range []receiver.DuplicatePolicy{receiver.DuplicateDrop, receiver.DuplicateDeadLetter,
		receiver.DuplicateDeliver, receiver.DuplicateHook} {
		g := newRig(t, true, func(c *receiver.Config) {
			c.Duplicates = p
			c.OnDuplicate = func(context.Context, *receiver.Message, string) {}
			c.InFlightWait = -1
		})
		g.store.stealClaim(idempotency.Key{Namespace: queue, ID: "ID:p:2"})
		if res := g.r.Process(bg, msg("ID:p:2"), okHandler); res.Action != receiver.Requeue || res.Ran {
			t.Errorf("policy %d, claim elsewhere: %+v", p, res)
		}
		started, release := make(chan struct{}), make(chan struct{})
		done := make(chan receiver.Result)
		go func() {
			done <- g.r.Process(bg, msg("ID:p:1"), func(ctx context.Context, _ *receiver.Message) error {
				close(started)
				blockUntil(ctx, t, release, testWait, "the test releasing the original")
				return nil
			})
		}()
		recv(t, started, testWait, "the original's handler starting")
		if res := g.r.Process(bg, msg("ID:p:1"), okHandler); res.Action != receiver.Requeue || res.Reason != "in-flight" || res.Ran {
			t.Errorf("policy %d, in flight here: %+v", p, res)
		}
		close(release)
		if res, _ := recv(t, done, testWait, "the original's Process returning"); res.Action != receiver.Ack {
			t.Errorf("original: %+v", res)
		}
	}
}

func TestInFlightWait(t *testing.T) {
	t.Parallel()
	for _, outcome := range []string{"success", "failure", "ctx"} {
		t.Run(outcome, func(t *testing.T) {
			t.Parallel()
			g := newRig(t, true, func(c *receiver.Config) { c.InFlightWait = time.Hour })
			started, release := make(chan struct{}), make(chan struct{})
			first := make(chan receiver.Result)
			go func() {
				first <- g.r.Process(bg, msg("ID:p:1"), func(ctx context.Context, _ *receiver.Message) error {
					close(started)
					blockUntil(ctx, t, release, testWait, "the test releasing the original")
					if outcome == "failure" {
						return errors.New("first failed")
					}
					return nil
				})
			}()
			recv(t, started, testWait, "the original's handler starting")
			ctx, cancel := context.WithCancel(bg)
			defer cancel()
			second := make(chan receiver.Result)
			var ran atomic.Bool
			go func() {
				second <- g.r.Process(ctx, msg("ID:p:1"), func(context.Context, *receiver.Message) error {
					ran.Store(true)
					return nil
				})
			}()
			// The second delivery must not finish while the first runs.
			select {
			case res := <-second:
				t.Fatalf("duplicate finished while the original was in flight: %+v", res)
			case <-time.After(20 * time.Millisecond):
			}
			if outcome == "ctx" {
				cancel()
				res, _ := recv(t, second, testWait, "the duplicate returning after its context was cancelled")
				if res.Action != receiver.Requeue || res.Reason != "in-flight" {
					t.Fatalf("ctx: %+v", res)
				}
				close(release)
				recv(t, first, testWait, "the original's Process returning")
				return
			}
			close(release)
			r1, _ := recv(t, first, testWait, "the original's Process returning")
			r2, _ := recv(t, second, testWait, "the duplicate's Process returning")
			switch outcome {
			case "success":
				if r1.Action != receiver.Ack || r2.Action != receiver.Ack || !r2.Duplicate || r2.Reason != "in-flight" || ran.Load() {
					t.Fatalf("success: %+v / %+v", r1, r2)
				}
			case "failure":
				if r1.Action != receiver.Requeue || r2.Action != receiver.Ack || r2.Duplicate || !ran.Load() {
					t.Fatalf("failure: %+v / %+v", r1, r2)
				}
			}
		})
	}
}

func TestRenewal(t *testing.T) {
	t.Parallel()
	g := newRig(t, true, func(c *receiver.Config) { c.RenewEvery = time.Millisecond })
	res := g.r.Process(bg, msg("ID:p:1"), func(ctx context.Context, m *receiver.Message) error {
		if !eventually(testWait, func() bool { return g.store.callCount("renew") >= 3 }) {
			t.Errorf("timed out after %v: three renewals while the handler ran did not happen", testWait)
		}
		return nil
	})
	if res.Action != receiver.Ack {
		t.Fatal(res)
	}
	stopped := g.store.callCount("renew")
	time.Sleep(5 * time.Millisecond)
	if n := g.store.callCount("renew"); n != stopped {
		t.Fatalf("renewal continued after the handler returned: %d → %d", stopped, n)
	}

	// A lost claim cancels the handler's context.
	res = g.r.Process(bg, msg("ID:p:2"), func(ctx context.Context, m *receiver.Message) error {
		g.clock.Advance(2 * time.Minute) // the lease lapses; the next renew finds it lost
		if !eventually(testWait, func() bool { return ctx.Err() != nil }) {
			t.Errorf("timed out after %v: the lost claim did not cancel the handler's context", testWait)
		}
		if !errors.Is(context.Cause(ctx), idempotency.ErrClaimLost) {
			t.Errorf("cause = %v", context.Cause(ctx))
		}
		return ctx.Err()
	})
	if res.Action != receiver.Requeue || res.Reason != "handler-error" {
		t.Fatalf("claim lost: %+v", res)
	}
	// A renewal error that is not a lost claim only logs.
	g.store.setFail("renew", 2)
	res = g.r.Process(bg, msg("ID:p:3"), func(ctx context.Context, m *receiver.Message) error {
		if !eventually(testWait, func() bool { return g.store.callCount("renew") >= stopped+6 }) {
			t.Errorf("timed out after %v: renewals going on through renewal errors did not happen", testWait)
		}
		return ctx.Err()
	})
	if res.Action != receiver.Ack {
		t.Fatalf("renew errors: %+v", res)
	}
}

// chainSelector is an extra selector with a fixed verdict that records its
// settlements.
type chainSelector struct {
	verdict receiver.Verdict
	mu      sync.Mutex
	settled []receiver.Settlement
}

func (s *chainSelector) Name() string { return "extra" }

func (s *chainSelector) Select(ctx context.Context, m *receiver.Message) (receiver.Decision, error) {
	d := receiver.Decision{Verdict: s.verdict, Reason: "metadata", Detail: s.verdict.String()}
	if s.verdict == receiver.Accept {
		d.Settle = func(_ context.Context, st receiver.Settlement) error {
			s.mu.Lock()
			s.settled = append(s.settled, st)
			s.mu.Unlock()
			return nil
		}
	}
	return d, nil
}

func TestSelectorChain(t *testing.T) {
	t.Parallel()
	k := idempotency.Key{Namespace: queue, ID: "ID:p:1"}
	t.Run("extra rejects: earlier tiers record completion", func(t *testing.T) {
		x := &chainSelector{verdict: receiver.Reject}
		g := newRig(t, true, func(c *receiver.Config) { c.Selectors = []receiver.Selector{x} })
		res := g.r.Process(bg, msg("ID:p:1"), okHandler)
		if res.Action != receiver.Ack || !res.Duplicate || res.Reason != "metadata" || res.Trace != "memory:new store:claimed extra:reject" {
			t.Fatalf("%+v", res)
		}
		if g.store.state(k) != "confirmed" || receiver.KeyState(g.r, msg("ID:p:1")) != "done" {
			t.Fatalf("store %s, memory %v", g.store.state(k), receiver.KeyState(g.r, msg("ID:p:1")))
		}
		if g.r.Metrics().Snapshot().DuplicatesOther != 1 {
			t.Fatal("not counted as other")
		}
	})
	t.Run("extra defers: earlier tiers undone", func(t *testing.T) {
		x := &chainSelector{verdict: receiver.Defer}
		g := newRig(t, true, func(c *receiver.Config) { c.Selectors = []receiver.Selector{x} })
		res := g.r.Process(bg, msg("ID:p:1"), okHandler)
		if res.Action != receiver.Requeue || res.Ran {
			t.Fatalf("%+v", res)
		}
		if g.store.state(k) != "free" || g.audit.has("c1", queue, "ID:p:1") {
			t.Fatal("claim or bit kept")
		}
	})
	t.Run("extra accepts: settled with the handler's outcome", func(t *testing.T) {
		x := &chainSelector{verdict: receiver.Accept}
		g := newRig(t, false, func(c *receiver.Config) { c.Selectors = []receiver.Selector{x} })
		g.r.Process(bg, msg("ID:p:1"), failing(errors.New("no")))
		g.r.Process(bg, msg("ID:p:1"), okHandler)
		if len(x.settled) != 2 || x.settled[0] != receiver.Failed || x.settled[1] != receiver.Completed {
			t.Fatalf("settled %v", x.settled)
		}
	})
	t.Run("selector func", func(t *testing.T) {
		f := receiver.SelectorFunc{Label: "even", Func: func(_ context.Context, m *receiver.Message) (receiver.Verdict, string, error) {
			if strings.HasSuffix(m.Key, "2") {
				return receiver.Reject, "even", nil
			}
			return receiver.Accept, "", nil
		}}
		g := newRig(t, false, func(c *receiver.Config) { c.Selectors = []receiver.Selector{f} })
		if res := g.r.Process(bg, msg("ID:p:2"), okHandler); res.Reason != "even" || !res.Duplicate {
			t.Fatalf("%+v", res)
		}
		if res := g.r.Process(bg, msg("ID:p:3"), okHandler); res.Duplicate || !res.Ran {
			t.Fatalf("%+v", res)
		}
	})
}

func TestForget(t *testing.T) {
	t.Parallel()
	g := newRig(t, false, nil)
	g.audit.Check("c1", queue, "ID:p:9") // marked, never run here
	if !g.r.Forget(msg("ID:p:9")) || g.audit.has("c1", queue, "ID:p:9") {
		t.Fatal("unknown key not rolled back")
	}
	g.r.Process(bg, msg("ID:p:1"), okHandler)
	if g.r.Forget(msg("ID:p:1")) || !g.audit.has("c1", queue, "ID:p:1") {
		t.Fatal("completed key rolled back")
	}
	if res := g.r.Process(bg, msg("ID:p:9"), okHandler); res.Duplicate {
		t.Fatalf("forgotten delivery taken as duplicate: %+v", res)
	}
	if g.r.Metrics().Snapshot().Forgotten != 1 {
		t.Fatal("forget not counted")
	}
}

func TestConfigErrors(t *testing.T) {
	t.Parallel()
	for name, cfg := range map[string]receiver.Config{
		"negative attempts":   {MaxAttempts: -1, MemoryOnly: true},
		"hook without func":   {Duplicates: receiver.DuplicateHook, MemoryOnly: true},
		"unknown policy":      {Duplicates: 9, MemoryOnly: true},
		"unknown missing key": {MissingKey: 9, MemoryOnly: true},
		"nil selector":        {Selectors: []receiver.Selector{nil}},
		"negative completed":  {Completed: -1, MemoryOnly: true},
	} {
		if _, err := receiver.New(cfg); !errors.Is(err, receiver.ErrConfig) {
			t.Errorf("%s: %v", name, err)
		}
	}
}

func TestWrapErrors(t *testing.T) {
	t.Parallel()
	boom := errors.New("boom")
	r, err := receiver.New(receiver.Config{Audit: newFakeAudit(), MaxAttempts: 2, MemoryOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	h := r.Wrap(failing(boom))
	err = h(bg, msg("ID:p:1"))
	if !errors.Is(err, receiver.ErrRequeue) || !errors.Is(err, boom) || receiver.ActionOf(err) != receiver.Requeue {
		t.Fatalf("first: %v", err)
	}
	res, ok := receiver.ResultOf(err)
	if !ok || res.Attempt != 1 || res.Reason != "handler-error" {
		t.Fatalf("ResultOf: %+v %v", res, ok)
	}
	err = h(bg, msg("ID:p:1"))
	if !errors.Is(err, receiver.ErrDeadLetter) || receiver.ActionOf(err) != receiver.DeadLetter {
		t.Fatalf("second: %v", err)
	}
	if receiver.ActionOf(errors.New("plain")) != receiver.Requeue || receiver.ActionOf(nil) != receiver.Ack {
		t.Fatal("ActionOf on plain errors")
	}
}

func TestMetricsCounts(t *testing.T) {
	t.Parallel()
	g := newRig(t, true, func(c *receiver.Config) { c.MaxAttempts = 2 })
	r := g.r
	r.Process(bg, msg("ID:p:1"), okHandler)
	r.Process(bg, &receiver.Message{Key: "ID:p:1", Destination: queue, Redelivered: true}, okHandler)
	r.Process(bg, msg("ID:p:2"), failing(errors.New("x")))
	r.Process(bg, msg("ID:p:2"), func(context.Context, *receiver.Message) error { panic(1) })
	r.Process(bg, msg(""), okHandler)
	g.restart(t)
	g.r.Process(bg, msg("ID:p:1"), okHandler)
	s := r.Metrics().Snapshot()
	want := receiver.Snapshot{Delivered: 5, Redelivered: 1, Processed: 1, DuplicatesAudit: 1, Retries: 1,
		DeadLettered: 2, HandlerErrors: 2, Panics: 1, MissingKeys: 1}
	s.StoreBuckets, s.StoreLatency, s.StoreCalls = nil, 0, 0
	if !reflect.DeepEqual(s, want) {
		t.Fatalf("snapshot\n got %+v\nwant %+v", s, want)
	}
	if s2 := g.r.Metrics().Snapshot(); s2.DuplicatesStore != 1 || s2.StoreCalls != 1 {
		t.Fatalf("after restart %+v", s2)
	}
	if s.Duplicates() != 1 {
		t.Fatal("Duplicates()")
	}
	full := r.Metrics().Snapshot()
	if full.StoreCalls != 6 || full.MeanStoreLatency() <= 0 {
		t.Fatalf("store calls %d", full.StoreCalls)
	}
	var sum uint64
	for _, b := range full.StoreBuckets {
		sum += b
	}
	if sum > full.StoreCalls {
		t.Fatalf("buckets %v > calls %d", full.StoreBuckets, full.StoreCalls)
	}
}
