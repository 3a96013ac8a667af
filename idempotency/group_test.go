package idempotency_test

import (
	"context"
	"errors"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/acemq/msgaudit/idempotency"
	"github.com/acemq/msgaudit/idempotency/storetest"
	"github.com/acemq/msgaudit/internal/testkit/testwait"
)

func TestGroupConformance(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name string
		o    idempotency.GroupOptions
	}{
		{"defaults", idempotency.GroupOptions{}},
		{"linger", idempotency.GroupOptions{MaxBatch: 8, Linger: 200 * time.Microsecond}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			storetest.Run(t, func(t *testing.T, o idempotency.Options) idempotency.Store {
				return group(t, memStore(t, o), c.o)
			}, storetest.Capabilities{})
		})
	}
}

// counting is a BatchStore over a Memory that counts its batch calls and
// their sizes, can hold batch calls at a gate, and can fail them.
type counting struct {
	*idempotency.Memory
	mu        sync.Mutex
	calls     map[string][]int // batch sizes per method
	gate      chan struct{}    // non-nil: batch calls wait for it to close
	entered   chan string      // non-nil: receives the method of each batch call on entry
	fail      error            // non-nil: every batch call fails with it
	released  chan idempotency.Claim
	lenAtStop int       // entries held when Close was called
	lastValue any       // valueKey's value in the last batch call's context
	lastDL    time.Time // the last batch call's deadline
}

func newCounting(tb testing.TB) *counting {
	return &counting{Memory: memStore(tb, idempotency.Options{}), calls: map[string][]int{}}
}

func (c *counting) enter(ctx context.Context, method string, n int) error {
	c.mu.Lock()
	c.lastValue = ctx.Value(valueKey{})
	c.lastDL, _ = ctx.Deadline()
	c.calls[method] = append(c.calls[method], n)
	gate, entered, fail := c.gate, c.entered, c.fail
	c.mu.Unlock()
	if entered != nil {
		entered <- method
	}
	if gate != nil {
		<-gate
	}
	return fail
}

func (c *counting) sizes(method string) []int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]int(nil), c.calls[method]...)
}

func (c *counting) TryClaimBatch(ctx context.Context, keys []idempotency.Key, res []idempotency.ClaimResult) error {
	if err := c.enter(ctx, "TryClaimBatch", len(keys)); err != nil {
		return err
	}
	return c.Memory.TryClaimBatch(ctx, keys, res)
}

func (c *counting) ConfirmBatch(ctx context.Context, claims []idempotency.Claim, errs []error) error {
	if err := c.enter(ctx, "ConfirmBatch", len(claims)); err != nil {
		return err
	}
	return c.Memory.ConfirmBatch(ctx, claims, errs)
}

func (c *counting) ReleaseBatch(ctx context.Context, claims []idempotency.Claim, errs []error) error {
	if err := c.enter(ctx, "ReleaseBatch", len(claims)); err != nil {
		return err
	}
	err := c.Memory.ReleaseBatch(ctx, claims, errs)
	if c.released != nil {
		for _, cl := range claims {
			c.released <- cl
		}
	}
	return err
}

func (c *counting) Close() error {
	c.mu.Lock()
	c.lenAtStop = c.Memory.Len()
	c.mu.Unlock()
	return c.Memory.Close()
}

// plain is a Store that is not a BatchStore.
type plain struct{ idempotency.Store }

func TestGroupUnchanged(t *testing.T) {
	t.Parallel()
	p := plain{memStore(t, idempotency.Options{})}
	if got := group(t, p, idempotency.GroupOptions{}); got != idempotency.Store(p) {
		t.Fatalf("Group of a non-BatchStore = %T, want the store itself", got)
	}
	m := memStore(t, idempotency.Options{})
	if got := group(t, m, idempotency.GroupOptions{MaxBatch: 1}); got != idempotency.Store(m) {
		t.Fatalf("Group with MaxBatch 1 = %T, want the store itself", got)
	}
	g := group(t, m, idempotency.GroupOptions{})
	if _, ok := g.(idempotency.BatchStore); ok {
		t.Fatal("a Group store is a BatchStore: grouping it again would queue twice")
	}
	if again := group(t, g, idempotency.GroupOptions{}); again != g {
		t.Fatal("Group of a Group store wrapped it again")
	}
}

// run starts f in n goroutines, each with its index, and returns a wait
// function.
func run(n int, f func(i int)) (wait func(t *testing.T, what string)) {
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			f(i)
		}()
	}
	return func(t *testing.T, what string) {
		t.Helper()
		testwait.Group(t, &wg, testwait.Long, what)
	}
}

func key(i int) idempotency.Key {
	return idempotency.Key{Namespace: "group", ID: "m" + string(rune('A'+i%26)) + itoa(i)}
}

func itoa(i int) string {
	var b [20]byte
	n := len(b)
	for {
		n--
		b[n] = byte('0' + i%10)
		i /= 10
		if i == 0 {
			return string(b[n:])
		}
	}
}

// TestGroupFormsBatchWhenFull: with a long Linger, requests wait until
// MaxBatch of them are queued and go as one batch call.
func TestGroupFormsBatchWhenFull(t *testing.T) {
	t.Parallel()
	const n = 10
	c := newCounting(t)
	g := group(t, c, idempotency.GroupOptions{MaxBatch: n, Linger: time.Hour})
	defer g.Close()
	ctx := testwait.Context(t, time.Minute)
	claims := make([]idempotency.Claim, n)
	run(n, func(i int) {
		out, cl, err := g.TryClaim(ctx, key(i))
		if err != nil || out != idempotency.Claimed {
			t.Errorf("TryClaim %d = %v, %v", i, out, err)
		}
		claims[i] = cl
	})(t, "the grouped TryClaims")
	run(n, func(i int) {
		if err := g.Confirm(ctx, claims[i]); err != nil {
			t.Errorf("Confirm %d: %v", i, err)
		}
	})(t, "the grouped Confirms")
	for _, m := range []string{"TryClaimBatch", "ConfirmBatch"} {
		if got := c.sizes(m); len(got) != 1 || got[0] != n {
			t.Errorf("%s calls = %v, want one of %d", m, got, n)
		}
	}
	for i := range n {
		if ok, err := c.IsConfirmed(ctx, key(i)); err != nil || !ok {
			t.Errorf("key %d confirmed = %v, %v", i, ok, err)
		}
	}
}

// TestGroupFormsBatchWhileInFlight: with no Linger, the requests that
// arrive while a batch call is in flight go together in the next one.
func TestGroupFormsBatchWhileInFlight(t *testing.T) {
	t.Parallel()
	const n = 20
	c := newCounting(t)
	c.gate, c.entered = make(chan struct{}), make(chan string, 4)
	g := group(t, c, idempotency.GroupOptions{})
	defer g.Close()
	ctx := testwait.Context(t, time.Minute)
	first := run(1, func(int) {
		if out, _, err := g.TryClaim(ctx, key(0)); err != nil || out != idempotency.Claimed {
			t.Errorf("first TryClaim = %v, %v", out, err)
		}
	})
	testwait.Recv(t, c.entered, testwait.Long, "the first batch call")
	rest := run(n, func(i int) {
		out, _, err := g.TryClaim(ctx, key(1+i%(n/2))) // each key twice: one Claimed, one InProgress
		if err != nil || out != idempotency.Claimed && out != idempotency.InProgress {
			t.Errorf("TryClaim = %v, %v", out, err)
		}
	})
	testwait.Until(t, testwait.Long, "20 queued claims", func() bool {
		q, _ := idempotency.GroupQueued(g)
		return q[0] == n
	})
	c.mu.Lock()
	c.entered = nil
	c.mu.Unlock()
	close(c.gate)
	first(t, "the first TryClaim")
	rest(t, "the queued TryClaims")
	if got := c.sizes("TryClaimBatch"); len(got) != 2 || got[0] != 1 || got[1] != n {
		t.Fatalf("TryClaimBatch calls = %v, want [1 %d]", got, n)
	}
	for i := 1; i <= n/2; i++ {
		if out, _, err := c.TryClaim(ctx, key(i)); err != nil || out != idempotency.InProgress {
			t.Fatalf("key %d after the batch = %v, %v; want in-progress", i, out, err)
		}
	}
}

// TestGroupAbandonedClaimReleased: a caller whose context ends while its
// TryClaim waits gets the context's error, and the claim its batch took
// for it is released, not left to block the key for a lease.
func TestGroupAbandonedClaimReleased(t *testing.T) {
	t.Parallel()
	c := newCounting(t)
	c.gate, c.entered = make(chan struct{}), make(chan string, 1)
	c.released = make(chan idempotency.Claim, 1)
	g := group(t, c, idempotency.GroupOptions{})
	defer g.Close()
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		_, _, err := g.TryClaim(ctx, key(1))
		errc <- err
	}()
	testwait.Recv(t, c.entered, testwait.Long, "the batch call")
	cancel()
	if err, _ := testwait.Recv(t, errc, testwait.Long, "the cancelled TryClaim's return"); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled TryClaim: %v, want context.Canceled", err)
	}
	c.mu.Lock()
	c.entered = nil
	c.mu.Unlock()
	close(c.gate) // the batch claims the key for nobody
	cl, _ := testwait.Recv(t, c.released, testwait.Long, "the release of the abandoned claim")
	if cl.Key != key(1) || cl.Token == "" {
		t.Fatalf("released %+v, want the claim of %v", cl, key(1))
	}
	bg := testwait.Context(t, time.Minute)
	if out, _, err := c.TryClaim(bg, key(1)); err != nil || out != idempotency.Claimed {
		t.Fatalf("TryClaim after the abandoned claim = %v, %v; want claimed", out, err)
	}
}

// TestGroupAbandonedConfirm: a Confirm whose caller left returns the
// context's error at once; the Group still answers later callers.
func TestGroupAbandonedConfirm(t *testing.T) {
	t.Parallel()
	c := newCounting(t)
	g := group(t, c, idempotency.GroupOptions{})
	defer g.Close()
	bg := testwait.Context(t, time.Minute)
	_, cl, err := g.TryClaim(bg, key(1))
	if err != nil {
		t.Fatal(err)
	}
	c.mu.Lock()
	c.gate, c.entered = make(chan struct{}), make(chan string, 1)
	c.mu.Unlock()
	ctx, cancel := context.WithCancel(bg)
	errc := make(chan error, 1)
	go func() { errc <- g.Confirm(ctx, cl) }()
	testwait.Recv(t, c.entered, testwait.Long, "the ConfirmBatch call")
	cancel()
	if err, _ := testwait.Recv(t, errc, testwait.Long, "the cancelled Confirm's return"); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled Confirm: %v, want context.Canceled", err)
	}
	c.mu.Lock()
	c.entered = nil
	c.mu.Unlock()
	close(c.gate)
	// The confirm went through after its caller left (its outcome was
	// unknown to the caller); the key reads as confirmed.
	testwait.Until(t, testwait.Long, "the confirm to land", func() bool {
		ok, _ := c.IsConfirmed(bg, key(1))
		return ok
	})
	if out, _, err := g.TryClaim(bg, key(1)); err != nil || out != idempotency.AlreadyConfirmed {
		t.Fatalf("TryClaim after = %v, %v", out, err)
	}
}

// TestGroupCloseDrains: Close with requests queued and one batch in
// flight answers them all before it closes the store; later calls get
// ErrClosed.
func TestGroupCloseDrains(t *testing.T) {
	t.Parallel()
	const n = 6
	c := newCounting(t)
	c.gate, c.entered = make(chan struct{}), make(chan string, 1)
	g := group(t, c, idempotency.GroupOptions{})
	ctx := testwait.Context(t, time.Minute)
	var answered atomic.Int32
	first := run(1, func(int) {
		if out, _, err := g.TryClaim(ctx, key(0)); err == nil && out == idempotency.Claimed {
			answered.Add(1)
		}
	})
	testwait.Recv(t, c.entered, testwait.Long, "the first batch call")
	c.mu.Lock()
	c.entered = nil
	c.mu.Unlock()
	rest := run(n-1, func(i int) {
		if out, _, err := g.TryClaim(ctx, key(1+i)); err == nil && out == idempotency.Claimed {
			answered.Add(1)
		} else {
			t.Errorf("queued TryClaim = %v, %v", out, err)
		}
	})
	testwait.Until(t, testwait.Long, "the queued claims", func() bool {
		q, _ := idempotency.GroupQueued(g)
		return q[0] == n-1
	})
	closed := make(chan error, 1)
	go func() { closed <- g.Close() }()
	close(c.gate)
	if err, _ := testwait.Recv(t, closed, testwait.Long, "Close"); err != nil {
		t.Fatalf("Close: %v", err)
	}
	first(t, "the first TryClaim")
	rest(t, "the queued TryClaims")
	if answered.Load() != n {
		t.Fatalf("%d of %d claims answered Claimed", answered.Load(), n)
	}
	c.mu.Lock()
	held := c.lenAtStop
	c.mu.Unlock()
	if held != n {
		t.Fatalf("the store held %d claims when Close reached it, want all %d", held, n)
	}
	if _, _, err := g.TryClaim(ctx, key(100)); !errors.Is(err, idempotency.ErrClosed) {
		t.Fatalf("TryClaim after Close: %v, want ErrClosed", err)
	}
	if err := g.Release(ctx, idempotency.Claim{Key: key(1)}); !errors.Is(err, idempotency.ErrClosed) {
		t.Fatalf("Release after Close: %v, want ErrClosed", err)
	}
	if err := g.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
}

// TestGroupWholeBatchError: a batch call that fails as a whole fails every
// caller in it with its error.
func TestGroupWholeBatchError(t *testing.T) {
	t.Parallel()
	const n = 8
	boom := errors.New("backend down")
	c := newCounting(t)
	g := group(t, c, idempotency.GroupOptions{MaxBatch: n, Linger: time.Hour})
	defer g.Close()
	ctx := testwait.Context(t, time.Minute)
	claims := make([]idempotency.Claim, n)
	run(n, func(i int) { _, claims[i], _ = g.TryClaim(ctx, key(i)) })(t, "the claims")
	c.mu.Lock()
	c.fail = boom
	c.mu.Unlock()
	var failed atomic.Int32
	check := func(what string, err error) {
		if errors.Is(err, boom) {
			failed.Add(1)
		} else {
			t.Errorf("%s: %v, want the batch's error", what, err)
		}
	}
	run(n, func(i int) {
		_, _, err := g.TryClaim(ctx, key(100+i))
		check("TryClaim", err)
	})(t, "the failing claims")
	run(n, func(i int) { check("Confirm", g.Confirm(ctx, claims[i])) })(t, "the failing confirms")
	run(n, func(i int) { check("Release", g.Release(ctx, claims[i])) })(t, "the failing releases")
	if failed.Load() != 3*n {
		t.Fatalf("%d of %d callers got the batch's error", failed.Load(), 3*n)
	}
	for _, m := range []string{"TryClaimBatch", "ConfirmBatch", "ReleaseBatch"} {
		got := c.sizes(m)
		if len(got) == 0 || got[len(got)-1] != n {
			t.Errorf("%s calls = %v, want the last of %d", m, got, n)
		}
	}
	// Nothing changed: the claims are still held.
	for i := range n {
		if out, _, err := c.TryClaim(ctx, key(i)); err != nil || out != idempotency.InProgress {
			t.Fatalf("key %d after the failed batches = %v, %v; want in-progress", i, out, err)
		}
	}
}

// TestGroupRace runs the consumer rule from many goroutines through one
// Group: every message succeeds exactly once, and when the calls stop the
// flushers have exited without Close.
func TestGroupRace(t *testing.T) {
	t.Parallel()
	const (
		goroutines = 64
		msgs       = 300
	)
	c := newCounting(t)
	g := group(t, c, idempotency.GroupOptions{MaxBatch: 16})
	ctx := testwait.Context(t, 2*time.Minute)
	var succeeded [msgs]atomic.Int32
	run(goroutines, func(w int) {
		pending := make([]int, msgs)
		for i := range pending {
			pending[i] = (i*7 + w*31) % msgs
		}
		rnd := uint32(w + 1)
		for len(pending) > 0 && ctx.Err() == nil {
			var requeue []int
			for _, m := range pending {
				out, cl, err := g.TryClaim(ctx, key(m))
				if err != nil {
					t.Errorf("TryClaim: %v", err)
					return
				}
				switch out {
				case idempotency.AlreadyConfirmed:
				case idempotency.InProgress:
					requeue = append(requeue, m)
				case idempotency.Claimed:
					rnd = rnd*1664525 + 1013904223
					if rnd>>30 == 0 {
						if err := g.Release(ctx, cl); err != nil {
							t.Errorf("Release: %v", err)
							return
						}
						requeue = append(requeue, m)
						continue
					}
					succeeded[m].Add(1)
					if err := g.Confirm(ctx, cl); err != nil {
						t.Errorf("Confirm: %v", err)
						return
					}
				}
			}
			pending = requeue
			runtime.Gosched()
		}
	})(t, "the racing consumers")
	for m := range msgs {
		if n := succeeded[m].Load(); n != 1 {
			t.Fatalf("message %d succeeded %d times, want once", m, n)
		}
	}
	testwait.Until(t, testwait.Long, "the flushers to exit", func() bool {
		_, f := idempotency.GroupQueued(g)
		return f == 0
	})
	var grouped int
	for _, m := range []string{"TryClaimBatch", "ConfirmBatch", "ReleaseBatch"} {
		for _, n := range c.sizes(m) {
			if n > 1 {
				grouped++
			}
		}
	}
	t.Logf("batch calls with more than one request: %d", grouped)
	if err := g.Close(); err != nil {
		t.Fatal(err)
	}
}

type valueKey struct{}

// TestGroupBatchContext: the batch call sees the first request's context
// values and the Timeout as its deadline, and no cancellation.
func TestGroupBatchContext(t *testing.T) {
	t.Parallel()
	c := newCounting(t)
	g := group(t, c, idempotency.GroupOptions{Timeout: time.Hour})
	defer g.Close()
	ctx := context.WithValue(testwait.Context(t, time.Minute), valueKey{}, "trace-1")
	start := time.Now()
	if _, _, err := g.TryClaim(ctx, key(1)); err != nil {
		t.Fatal(err)
	}
	c.mu.Lock()
	v, d := c.lastValue, c.lastDL
	c.mu.Unlock()
	if v != "trace-1" {
		t.Fatalf("batch context value = %v, want the caller's", v)
	}
	if d.Before(start.Add(time.Hour)) || d.After(time.Now().Add(time.Hour)) {
		t.Fatalf("batch context deadline = %v; want the call plus one hour", d)
	}
}

// TestGroupCloseEndsLinger: Close sends the requests a long Linger holds
// back at once instead of after the Linger.
func TestGroupCloseEndsLinger(t *testing.T) {
	t.Parallel()
	const n = 3
	c := newCounting(t)
	g := group(t, c, idempotency.GroupOptions{MaxBatch: 100, Linger: time.Hour})
	ctx := testwait.Context(t, time.Minute)
	wait := run(n, func(i int) {
		if out, _, err := g.TryClaim(ctx, key(i)); err != nil || out != idempotency.Claimed {
			t.Errorf("TryClaim %d = %v, %v", i, out, err)
		}
	})
	testwait.Until(t, testwait.Long, "three lingering claims", func() bool {
		q, _ := idempotency.GroupQueued(g)
		return q[0] == n
	})
	closed := make(chan error, 1)
	go func() { closed <- g.Close() }()
	if err, _ := testwait.Recv(t, closed, testwait.Long, "Close of a lingering Group"); err != nil {
		t.Fatal(err)
	}
	wait(t, "the lingering claims")
	if got := c.sizes("TryClaimBatch"); len(got) != 1 || got[0] != n {
		t.Fatalf("TryClaimBatch calls = %v, want one of %d", got, n)
	}
}
