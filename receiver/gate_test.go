package receiver_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/acemq/msgaudit/idempotency"
	"github.com/acemq/msgaudit/internal/admission"
	"github.com/acemq/msgaudit/receiver"
)

func TestHandlersConfig(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		handlers int
		ok       bool
	}{{-1, false}, {-100, false}, {0, true}, {1, true}, {64, true}} {
		_, err := receiver.New(receiver.Config{MemoryOnly: true, Handlers: tc.handlers})
		if tc.ok != (err == nil) || (err != nil && !errors.Is(err, receiver.ErrConfig)) {
			t.Errorf("Handlers %d: err %v", tc.handlers, err)
		}
	}
	for n, want := range map[int]int{-3: 0, 0: 0, 1: 1, 7: 7} {
		if got := admission.New(n).Cap(); got != want {
			t.Errorf("NewGate(%d).Cap() = %d, want %d", n, got, want)
		}
	}
}

// running tracks how many handlers run at once, per group.
type running struct {
	mu       sync.Mutex
	now, max map[string]int
}

func newRunning() *running { return &running{now: map[string]int{}, max: map[string]int{}} }

func (r *running) enter(groups ...string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, g := range groups {
		r.now[g]++
		r.max[g] = max(r.max[g], r.now[g])
	}
}

func (r *running) leave(groups ...string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, g := range groups {
		r.now[g]--
	}
}

func (r *running) get(g string) (now, peak int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.now[g], r.max[g]
}

// TestGateBoundsHandlers runs many Process calls at once, new keys,
// redeliveries, duplicates handed to the handler and keyless deliveries,
// through a receiver with Handlers = 3 and two admission gates of 2 and 1,
// and checks that the bounds are never exceeded, and reached. Run it with
// -race.
func TestGateBoundsHandlers(t *testing.T) {
	t.Parallel()
	const total = 3
	s := memStore(t, idempotency.Options{})
	defer s.Close()
	r, err := receiver.New(receiver.Config{Store: s, Handlers: total, Duplicates: receiver.DuplicateDeliver,
		MissingKey: receiver.MissingKeyProcess, MaxAttempts: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	gates := map[string]*admission.Gate{"a": admission.New(2), "b": admission.New(1), "c": nil}
	run := newRunning()
	// Until every bound has been reached once, handlers wait for it (so a
	// gate that admits too few fails by timing out); after that they return
	// at once or after a short random pause.
	var reached atomic.Bool
	h := func(group string) receiver.Handler {
		return func(ctx context.Context, m *receiver.Message) error {
			run.enter(group, "all")
			defer run.leave(group, "all")
			if !reached.Load() {
				eventually(testWait, func() bool {
					_, a := run.get("a")
					_, b := run.get("b")
					_, all := run.get("all")
					return reached.Load() || a == 2 && b == 1 && all == total
				})
				reached.Store(true)
			}
			if rand.IntN(4) == 0 {
				time.Sleep(time.Duration(rand.IntN(200)) * time.Microsecond)
			}
			if rand.IntN(10) == 0 {
				return errors.New("flaky")
			}
			return nil
		}
	}
	var wg sync.WaitGroup
	for w := range 12 {
		group := []string{"a", "b", "c"}[w%3]
		ctx := admission.With(bg, gates[group], nil)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 150 {
				key := fmt.Sprintf("k-%d", rand.IntN(400))
				if i%17 == 0 {
					key = "" // no key: MissingKeyProcess runs the handler
				}
				m := &receiver.Message{Key: key, Destination: "/queue/gate-" + group}
				if res := r.Process(ctx, m, h(group)); res.Action == receiver.DeadLetter {
					t.Errorf("%s: %+v", key, res)
				}
			}
		}()
	}
	waitGroup(t, &wg, time.Minute, "the workers finishing")
	if !reached.Load() {
		t.Fatal("the bounds were never all reached at once")
	}
	for g, limit := range map[string]int{"a": 2, "b": 1, "all": total} {
		if now, peak := run.get(g); peak != limit || now != 0 {
			t.Errorf("group %s: peak %d handlers at once (bound %d), %d still running", g, peak, limit, now)
		}
	}
	if n := receiver.InFlightCount(r); n != 0 {
		t.Fatalf("%d keys still in flight", n)
	}
}

// blocker is a handler that reports when it starts and returns when
// released.
type blocker struct {
	started chan string
	release chan struct{}
}

func newBlocker() *blocker {
	return &blocker{started: make(chan string, 16), release: make(chan struct{})}
}

func (b *blocker) handle(ctx context.Context, m *receiver.Message) error {
	b.started <- m.Key
	<-b.release
	return nil
}

// confirmGate is a store whose Confirm waits until released.
type confirmGate struct {
	idempotency.Store
	confirming chan idempotency.Key
	release    chan struct{}
}

func (s *confirmGate) Confirm(ctx context.Context, c idempotency.Claim) error {
	s.confirming <- c.Key
	<-s.release
	return s.Store.Confirm(ctx, c)
}

// TestGateReleasedBeforeSettle: with Handlers 1, a finished handler whose
// confirm is still running does not hold the slot: the next delivery's
// handler runs meanwhile.
func TestGateReleasedBeforeSettle(t *testing.T) {
	t.Parallel()
	mem := memStore(t, idempotency.Options{})
	defer mem.Close()
	st := &confirmGate{Store: mem, confirming: make(chan idempotency.Key, 4), release: make(chan struct{})}
	r, err := receiver.New(receiver.Config{Store: st, Handlers: 1})
	if err != nil {
		t.Fatal(err)
	}
	first := make(chan receiver.Result, 1)
	go func() { first <- r.Process(bg, msg("ID:s:1"), okHandler) }()
	if k, _ := recv(t, st.confirming, testWait, "the first delivery's confirm"); k.ID != "ID:s:1" {
		t.Fatalf("confirm of %v", k)
	}
	ran := make(chan struct{})
	second := make(chan receiver.Result, 1)
	go func() {
		second <- r.Process(bg, msg("ID:s:2"), func(context.Context, *receiver.Message) error { close(ran); return nil })
	}()
	recv(t, ran, testWait, "the second handler running while the first delivery's confirm is blocked")
	close(st.release)
	for _, ch := range []chan receiver.Result{first, second} {
		if res, _ := recv(t, ch, testWait, "a result"); res.Action != receiver.Ack || !res.Ran {
			t.Fatalf("%+v", res)
		}
	}
}

// TestGateAbandon covers the deliveries abandoned before their handler
// started: their claim is released, their audit bit rolled back and their
// in-flight mark removed, so the redelivery runs as new work; the result
// tells the transport to send nothing.
func TestGateAbandon(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		key    string
		dup    bool // the key is processed once first: a duplicate, delivered (DuplicateDeliver)
		cancel bool // abandoned by cancelling the context, not by the abandon signal
		mod    func(*receiver.Config)
	}{
		{name: "abandon closed while waiting", key: "ID:a:1"},
		{name: "context cancelled while waiting", key: "ID:a:2", cancel: true},
		{name: "duplicate delivered", key: "ID:a:3", dup: true, mod: func(c *receiver.Config) { c.Duplicates = receiver.DuplicateDeliver }},
		{name: "missing key processed", key: "", mod: func(c *receiver.Config) { c.MissingKey = receiver.MissingKeyProcess }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			g := newRig(t, true, func(c *receiver.Config) {
				c.Handlers = 1
				if tc.mod != nil {
					tc.mod(c)
				}
			})
			m := msg(tc.key)
			if tc.dup {
				if res := g.r.Process(bg, msg(tc.key), okHandler); res.Action != receiver.Ack {
					t.Fatal(res)
				}
			}
			hold := newBlocker()
			held := make(chan receiver.Result, 1)
			go func() { held <- g.r.Process(bg, msg("ID:hold:1"), hold.handle) }()
			recv(t, hold.started, testWait, "the slot holder starting")

			var ctx context.Context
			var abandon func()
			if tc.cancel {
				ctx, abandon = context.WithCancel(bg)
			} else {
				ch := make(chan struct{})
				ctx, abandon = admission.With(bg, nil, ch), func() { close(ch) }
			}
			var calls atomic.Int32
			count := func(context.Context, *receiver.Message) error { calls.Add(1); return nil }
			done := make(chan receiver.Result, 1)
			go func() { done <- g.r.Process(ctx, m, count) }()
			k := idempotency.Key{Namespace: queue, ID: tc.key}
			claims := tc.key != "" && !tc.dup
			if claims && !eventually(testWait, func() bool { return g.store.state(k) == "claimed" }) {
				t.Fatal("the waiting delivery never claimed its key")
			}
			abandon()
			res, _ := recv(t, done, testWait, "the abandoned delivery's result")
			if res.Action != receiver.Requeue || res.Ran || res.Reason != "abandoned" || !errors.Is(res.Err, receiver.ErrAbandoned) {
				t.Fatalf("result %+v", res)
			}
			if calls.Load() != 0 {
				t.Fatal("the abandoned delivery's handler ran")
			}
			if claims {
				if st := g.store.state(k); st != "free" {
					t.Fatalf("claim after abandon: %s", st)
				}
				if g.audit.has("c1", queue, tc.key) {
					t.Fatal("audit bit kept after abandon")
				}
			}
			close(hold.release)
			if res, _ := recv(t, held, testWait, "the slot holder's result"); res.Action != receiver.Ack {
				t.Fatalf("holder %+v", res)
			}
			if n := receiver.InFlightCount(g.r); n != 0 {
				t.Fatalf("%d in flight after abandon", n)
			}
			// The redelivery runs (the duplicate is delivered again).
			res = g.r.Process(bg, m, count)
			if res.Action != receiver.Ack || !res.Ran || calls.Load() != 1 || res.Duplicate != tc.dup {
				t.Fatalf("redelivery %+v, %d calls", res, calls.Load())
			}
		})
	}
}

// TestGateAbandonedAfterAcquire: a delivery arriving after the abandon
// signal never starts its handler even though a slot is free.
func TestGateAbandonedAfterAcquire(t *testing.T) {
	t.Parallel()
	for _, handlers := range []int{0, 1} {
		g := newRig(t, true, func(c *receiver.Config) { c.Handlers = handlers })
		ch := make(chan struct{})
		close(ch)
		for _, gate := range []*admission.Gate{nil, admission.New(1)} {
			ctx := admission.With(bg, gate, ch)
			res := g.r.Process(ctx, msg("ID:late:1"), func(context.Context, *receiver.Message) error {
				t.Error("handler ran after the abandon signal")
				return nil
			})
			if res.Action != receiver.Requeue || res.Ran || !errors.Is(res.Err, receiver.ErrAbandoned) {
				t.Fatalf("handlers %d, gate %v: %+v", handlers, gate.Cap(), res)
			}
		}
		if st := g.store.state(idempotency.Key{Namespace: queue, ID: "ID:late:1"}); st != "free" {
			t.Fatalf("claim %s", st)
		}
	}
}

// TestGateRenewsWhileWaiting: a delivery waiting for a slot keeps its
// claim renewed, and one whose claim is lost meanwhile gives up without
// running.
func TestGateRenewsWhileWaiting(t *testing.T) {
	t.Parallel()
	g := newRig(t, true, func(c *receiver.Config) {
		c.Handlers = 1
		c.RenewEvery = time.Millisecond
		c.MissingKey = receiver.MissingKeyProcess
	})
	// A keyless delivery holds the slot: it has no claim to renew, so
	// every renewal counted is the waiting delivery's.
	hold := newBlocker()
	held := make(chan receiver.Result, 1)
	go func() { held <- g.r.Process(bg, msg(""), hold.handle) }()
	recv(t, hold.started, testWait, "the slot holder starting")
	var calls atomic.Int32
	done := make(chan receiver.Result, 1)
	go func() {
		done <- g.r.Process(bg, msg("ID:w:1"), func(context.Context, *receiver.Message) error { calls.Add(1); return nil })
	}()
	if !eventually(testWait, func() bool { return g.store.callCount("renew") >= 3 }) {
		t.Fatal("no renewals while the delivery waited for a slot")
	}
	g.clock.Advance(2 * time.Minute) // the lease lapses: the next renewal finds the claim lost
	res, _ := recv(t, done, testWait, "the waiting delivery giving up")
	if res.Ran || calls.Load() != 0 || !errors.Is(res.Err, receiver.ErrAbandoned) || !errors.Is(res.Err, idempotency.ErrClaimLost) {
		t.Fatalf("claim lost while waiting: %+v", res)
	}
	close(hold.release)
	if res, _ := recv(t, held, testWait, "the slot holder's result"); res.Action != receiver.Ack {
		t.Fatalf("holder %+v", res)
	}
}

// slowBatch is a BatchStore whose batch calls take a round trip and record
// their sizes.
type slowBatch struct {
	*idempotency.Memory
	mu               sync.Mutex
	claims, confirms []int
}

func (s *slowBatch) TryClaimBatch(ctx context.Context, keys []idempotency.Key, res []idempotency.ClaimResult) error {
	s.mu.Lock()
	s.claims = append(s.claims, len(keys))
	s.mu.Unlock()
	time.Sleep(2 * time.Millisecond)
	return s.Memory.TryClaimBatch(ctx, keys, res)
}

func (s *slowBatch) ConfirmBatch(ctx context.Context, claims []idempotency.Claim, errs []error) error {
	s.mu.Lock()
	s.confirms = append(s.confirms, len(claims))
	s.mu.Unlock()
	time.Sleep(2 * time.Millisecond)
	return s.Memory.ConfirmBatch(ctx, claims, errs)
}

func (s *slowBatch) largest() (claim, confirm int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Max(append(s.claims, 0)), slices.Max(append(s.confirms, 0))
}

// TestGateGroupsStoreCalls: many deliveries in Process at once with only
// two handler slots, over a grouping store: the claims of the waiting
// deliveries and the confirms of the finished ones share batches, and
// every delivery is acknowledged once.
func TestGateGroupsStoreCalls(t *testing.T) {
	t.Parallel()
	mem := memStore(t, idempotency.Options{})
	defer mem.Close()
	st := &slowBatch{Memory: mem}
	r, err := receiver.New(receiver.Config{Store: st, Handlers: 2})
	if err != nil {
		t.Fatal(err)
	}
	const inFlight, perWorker = 40, 10
	start := make(chan struct{})
	var acked atomic.Int32
	var wg sync.WaitGroup
	for w := range inFlight {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			for i := range perWorker {
				res := r.Process(bg, msg(fmt.Sprintf("ID:g:%d:%d", w, i)), okHandler)
				if res.Action != receiver.Ack || !res.Ran {
					t.Errorf("%+v", res)
					return
				}
				acked.Add(1)
			}
		}()
	}
	close(start)
	waitGroup(t, &wg, time.Minute, "the deliveries finishing")
	if acked.Load() != inFlight*perWorker {
		t.Fatalf("%d acknowledged, want %d", acked.Load(), inFlight*perWorker)
	}
	claim, confirm := st.largest()
	if claim < 2 || confirm < 2 {
		t.Fatalf("largest batches: %d claims, %d confirms; want both grouped", claim, confirm)
	}
	st.mu.Lock()
	t.Logf("%d deliveries: %d claim batches (largest %d), %d confirm batches (largest %d)",
		inFlight*perWorker, len(st.claims), claim, len(st.confirms), confirm)
	st.mu.Unlock()
}

// TestAdmissionAbandon: a transport's workers: eight deliveries go through
// Process at once (their claims made together), two handlers run at once.
// When the connection is lost the transport closes abandon: a delivery
// still waiting for a handler slot gives up, rolled back, and the
// transport sends nothing for it.
func TestAdmissionAbandon(t *testing.T) {
	t.Parallel()
	store := memStore(t, idempotency.Options{})
	defer store.Close()
	r, err := receiver.New(receiver.Config{Store: store, Handlers: 2})
	if err != nil {
		t.Fatal(err)
	}
	abandon := make(chan struct{}) // closed when the connection is lost
	ctx := admission.With(context.Background(), admission.New(2), abandon)
	var acked atomic.Int32
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Go(func() {
			m := &receiver.Message{Key: fmt.Sprintf("ID:p:%d", w+1), Destination: "/queue/orders"}
			if res := r.Process(ctx, m, okHandler); res.Action == receiver.Ack {
				acked.Add(1)
			}
		})
	}
	wg.Wait()
	if n := acked.Load(); n != 8 {
		t.Fatalf("acknowledged %d, want 8", n)
	}
	close(abandon) // the connection is gone
	res := r.Process(ctx, &receiver.Message{Key: "ID:p:9", Destination: "/queue/orders"}, okHandler)
	if res.Action != receiver.Requeue || res.Reason != "abandoned" || res.Ran || !errors.Is(res.Err, receiver.ErrAbandoned) {
		t.Fatalf("after abandon: %+v", res)
	}
}
