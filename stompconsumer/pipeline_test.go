package stompconsumer

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/acemq/msgaudit/idempotency"
	"github.com/acemq/msgaudit/receiver"
)

// TestConfigInFlight: the default depth per subscription, the overrides,
// and the values New refuses.
func TestConfigInFlight(t *testing.T) {
	t.Parallel()
	h := func(context.Context, *receiver.Message) error { return nil }
	for _, tc := range []struct {
		name string
		cfg  Config
		sub  Subscription
		want int // 0: an error
	}{
		{"default: one handler, in order", Config{}, Subscription{}, 1},
		{"one handler, large prefetch", Config{Prefetch: 500}, Subscription{}, 1},
		{"several handlers: the prefetch window", Config{Concurrency: 4}, Subscription{}, defaultPrefetch},
		{"more handlers than prefetch", Config{Concurrency: 8, Prefetch: 4}, Subscription{}, 8},
		{"subscription's own concurrency", Config{}, Subscription{Concurrency: 3, Prefetch: 30}, 30},
		{"config value", Config{Concurrency: 4, InFlight: 10}, Subscription{}, 10},
		{"subscription value wins", Config{Concurrency: 4, InFlight: 10}, Subscription{InFlight: 20}, 20},
		{"claimed ahead, one handler", Config{InFlight: 8}, Subscription{}, 8},
		{"below concurrency", Config{Concurrency: 4, InFlight: 3}, Subscription{}, 0},
		{"above prefetch", Config{Concurrency: 4, Prefetch: 10, InFlight: 11}, Subscription{}, 0},
		{"negative", Config{Concurrency: 4, InFlight: -1}, Subscription{}, 0},
		{"subscription above its prefetch", Config{Concurrency: 2}, Subscription{Prefetch: 5, InFlight: 6}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := tc.cfg
			cfg.Pipeline.MemoryOnly, cfg.Addresses = true, []string{"h"}
			sub := tc.sub
			sub.Destination, sub.Handler = "/queue/a", h
			cfg.Subscriptions = []Subscription{sub}
			c, err := New(cfg)
			switch {
			case tc.want == 0 && !errors.Is(err, ErrConfig):
				t.Fatalf("New: %v, want ErrConfig", err)
			case tc.want == 0:
			case err != nil:
				t.Fatal(err)
			case c.subs[0].InFlight != tc.want:
				t.Fatalf("InFlight %d, want %d", c.subs[0].InFlight, tc.want)
			}
		})
	}
}

// peaks tracks the handlers running at once per subscription.
type peaks struct {
	mu        sync.Mutex
	now, peak map[string]int
}

func (p *peaks) enter(name string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.now[name]++
	p.peak[name] = max(p.peak[name], p.now[name])
}

func (p *peaks) leave(name string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.now[name]--
}

// TestPipelineDepth: two subscriptions of one consumer over a store, one
// with Concurrency 1 (its handler sees its queue in order), one with
// Concurrency 3 and the default depth (never more than 3 handlers at
// once, though up to its prefetch go through the pipeline). Every message
// is applied once.
func TestPipelineDepth(t *testing.T) {
	addr := stompAddr(t)
	qa, qb := "/queue/"+uniq("msgaudit.order"), "/queue/"+uniq("msgaudit.depth")
	tag := uniq("tag")
	const n = 300
	produce(t, addr, qa, tag, n, nil)
	produce(t, addr, qb, tag, n, nil)
	store := memStore(t, idempotency.Options{})
	defer store.Close()
	p := &peaks{now: map[string]int{}, peak: map[string]int{}}
	var mu sync.Mutex
	var order []string
	la, lb := newLedger(), newLedger()
	ha, hb := la.handler(0, 0), lb.handler(0, 0)
	c, err := New(Config{
		Addresses:             []string{addr},
		Prefetch:              50,
		DeadLetterDestination: noDeadLetters(t, addr),
		Subscriptions: []Subscription{
			{Destination: qa, Handler: func(ctx context.Context, m *receiver.Message) error {
				p.enter("a")
				defer p.leave("a")
				mu.Lock()
				order = append(order, string(m.Body))
				mu.Unlock()
				return ha(ctx, m)
			}},
			{Destination: qb, Concurrency: 3, Handler: func(ctx context.Context, m *receiver.Message) error {
				p.enter("b")
				defer p.leave("b")
				time.Sleep(time.Millisecond) // long enough for the others to pile up at the gate
				return hb(ctx, m)
			}},
		},
		Pipeline: receiver.Config{Store: store}})
	if err != nil {
		t.Fatal(err)
	}
	if c.subs[0].InFlight != 1 || c.subs[1].InFlight != 50 {
		t.Fatalf("depths %d, %d; want 1 and 50", c.subs[0].InFlight, c.subs[1].InFlight)
	}
	stop := runConsumer(t, c)
	waitFor(t, time.Minute, "every message applied", func() bool { return la.count() == n && lb.count() == n })
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	la.verify(t, n)
	lb.verify(t, n)
	mu.Lock()
	for i, body := range order {
		if body != fmt.Sprint(i) {
			t.Fatalf("the Concurrency 1 handler saw message %s as its %dth", body, i)
		}
	}
	mu.Unlock()
	p.mu.Lock()
	if p.peak["a"] != 1 || p.peak["b"] > 3 || p.peak["b"] < 2 {
		t.Errorf("peak handlers at once: a %d (Concurrency 1), b %d (Concurrency 3)", p.peak["a"], p.peak["b"])
	}
	p.mu.Unlock()
	for _, q := range []string{qa, qb} {
		if left := drain(t, addr, q, 300*time.Millisecond); len(left) != 0 {
			t.Errorf("%s: %d left", q, len(left))
		}
		checkBrokerDLQ(t, addr, q)
	}
}

// TestClaimedAheadStopAndCut: deliveries claimed ahead of two busy
// handlers. A graceful stop (first case) or a connection cut (second)
// abandons them: not acknowledged, their claims released and audit bits
// rolled back, so that a consumer that comes next (the same one after the
// cut, a new one over the same store after the stop) applies every one of
// them once.
func TestClaimedAheadStopAndCut(t *testing.T) {
	addr := stompAddr(t)
	for _, cut := range []bool{false, true} {
		t.Run(map[bool]string{false: "stop", true: "cut"}[cut], func(t *testing.T) {
			q := "/queue/" + uniq("msgaudit.ahead")
			tag := uniq("tag")
			const n, concurrency = 20, 2
			produce(t, addr, q, tag, n, nil)
			store := memStore(t, idempotency.Options{})
			defer store.Close()
			px := newProxy(t, addr)
			l := newLedger()
			apply := l.handler(0, 0)
			release := make(chan struct{})
			started := make(chan string, n)
			var blocked, running, peak atomic.Int32
			h := func(ctx context.Context, m *receiver.Message) error {
				n := running.Add(1)
				defer running.Add(-1)
				for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
				}
				if blocked.Add(1) <= concurrency {
					started <- string(m.Body)
					blockUntil(ctx, t, release, time.Minute, "the test to release the first handlers")
				}
				return apply(ctx, m)
			}
			dlq := noDeadLetters(t, addr)
			c, err := New(Config{
				Addresses:             []string{px.Addr()},
				Prefetch:              n,
				Concurrency:           concurrency,
				DeadLetterDestination: dlq,
				ReconnectBackoff:      receiver.Backoff{Initial: time.Millisecond, Max: 10 * time.Millisecond},
				Subscriptions:         []Subscription{{Destination: q, Handler: h}},
				Pipeline:              receiver.Config{Store: store, Backoff: receiver.Backoff{Initial: time.Millisecond, Max: 5 * time.Millisecond}}})
			if err != nil {
				t.Fatal(err)
			}
			stop := runConsumer(t, c)
			for range concurrency {
				recv(t, started, 30*time.Second, "a handler starting")
			}
			waitFor(t, 30*time.Second, "the window claimed", func() bool { return c.Metrics().Snapshot().Delivered == n })
			if !cut {
				stopped := make(chan error, 1)
				go func() { stopped <- stop() }()
				waitFor(t, 30*time.Second, "the claimed-ahead deliveries abandoned", func() bool { return c.Stats().Dropped == n-concurrency })
				close(release)
				if err, _ := recv(t, stopped, time.Minute, "the graceful stop"); err != nil {
					t.Fatal(err)
				}
				if l.count() != concurrency {
					t.Fatalf("%d applied before the stop, want the %d running", l.count(), concurrency)
				}
				// The next consumer over the same store.
				c2, err := New(Config{
					Addresses:             []string{addr},
					Prefetch:              n,
					Concurrency:           concurrency,
					DeadLetterDestination: dlq,
					Subscriptions:         []Subscription{{Destination: q, Handler: apply}},
					Pipeline:              receiver.Config{Store: store}})
				if err != nil {
					t.Fatal(err)
				}
				stop2 := runConsumer(t, c2)
				waitFor(t, 30*time.Second, "every message applied", func() bool { return l.count() == n })
				if err := stop2(); err != nil {
					t.Fatal(err)
				}
				if m := c2.Metrics().Snapshot(); m.Duplicates() != 0 || m.Processed != n-concurrency {
					t.Errorf("second consumer %+v: the abandoned deliveries should be new work", m)
				}
			} else {
				if px.Cut() != 1 {
					t.Fatal("no live connection to cut")
				}
				waitFor(t, 30*time.Second, "the claimed-ahead deliveries abandoned", func() bool { return c.Stats().Dropped >= n-concurrency })
				waitFor(t, 30*time.Second, "the reconnect", func() bool { return c.Stats().Reconnects >= 1 })
				close(release)
				waitFor(t, time.Minute, "every message applied", func() bool { return l.count() == n })
				if err := stop(); err != nil {
					t.Fatal(err)
				}
			}
			l.verify(t, n)
			if p := peak.Load(); p > concurrency {
				t.Errorf("%d handlers ran at once (over both connections); Concurrency is %d", p, concurrency)
			}
			if left := drain(t, addr, q, 300*time.Millisecond); len(left) != 0 {
				t.Errorf("queue not empty: %d left", len(left))
			}
			checkBrokerDLQ(t, addr, q)
			t.Logf("stats %+v", c.Stats())
		})
	}
}
