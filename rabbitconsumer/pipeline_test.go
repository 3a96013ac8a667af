package rabbitconsumer

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/acemq/msgaudit/idempotency"
	"github.com/acemq/msgaudit/receiver"
	amqp "github.com/rabbitmq/amqp091-go"
)

// TestConfigInFlight: the default depth, and the values New refuses.
func TestConfigInFlight(t *testing.T) {
	t.Parallel()
	base := Config{URL: "amqp://guest:guest@127.0.0.1/", Queue: "orders", Handler: nopHandler, Pipeline: receiver.Config{MemoryOnly: true}}
	for _, tc := range []struct {
		concurrency, prefetch, inFlight int
		want                            int // 0: an error
	}{
		{0, 0, 0, 1},                   // Concurrency 1: one at a time, in order
		{1, 200, 0, 1},                 // still in order with a large prefetch
		{4, 0, 0, defaultPrefetch},     // Concurrency > 1: the prefetch window
		{4, 10, 0, 10},                 //
		{100, 10, 0, 100},              // more handlers than prefetch: one each
		{4, 50, 4, 4},                  // explicit, at Concurrency
		{4, 50, 50, 50},                // explicit, at Prefetch
		{1, 50, 8, 8},                  // claimed ahead, one handler
		{4, 50, 3, 0},                  // below Concurrency
		{4, 50, 51, 0},                 // above Prefetch
		{4, 50, -1, 0},                 // negative
		{100, 10, 100, 100},            // at Concurrency above Prefetch
		{100, 10, 101, 0},              // above both
		{2, 65535, 65535, 65535},       // the largest prefetch
		{2, 0, defaultPrefetch + 1, 0}, // above the default prefetch
		{2, 0, defaultPrefetch, defaultPrefetch},
	} {
		cfg := base
		cfg.Concurrency, cfg.Prefetch, cfg.InFlight = tc.concurrency, tc.prefetch, tc.inFlight
		c, err := cfg.withDefaults()
		switch {
		case tc.want == 0 && err == nil:
			t.Errorf("%+v: InFlight %d accepted", tc, c.InFlight)
		case tc.want != 0 && err != nil:
			t.Errorf("%+v: %v", tc, err)
		case tc.want != 0 && c.InFlight != tc.want:
			t.Errorf("%+v: InFlight %d, want %d", tc, c.InFlight, tc.want)
		}
	}
}

// TestOrderWithConcurrencyOne: with Concurrency 1 (the default) the
// handler sees the queue's messages in order, even with a store and a
// large prefetch.
func TestOrderWithConcurrencyOne(t *testing.T) {
	t.Parallel()
	const total = 300
	b := newBroker(t)
	q := b.queue("msgaudit-order-")
	b.publishMany(q, total, func(i int) amqp.Publishing {
		return amqp.Publishing{MessageId: fmt.Sprintf("%s-%04d", q, i), Body: []byte(fmt.Sprint(i))}
	})
	store := memStore(t, idempotency.Options{})
	defer store.Close()
	var mu sync.Mutex
	var seen []string
	c, err := New(Config{
		URL:      b.url,
		Queue:    q,
		Prefetch: 100,
		Handler: func(_ context.Context, m *receiver.Message) error {
			mu.Lock()
			defer mu.Unlock()
			seen = append(seen, m.Key)
			return nil
		},
		Pipeline: receiver.Config{Store: store}})
	if err != nil {
		t.Fatal(err)
	}
	if c.cfg.InFlight != 1 {
		t.Fatalf("InFlight %d with Concurrency 1", c.cfg.InFlight)
	}
	stop := runConsumer(t, c)
	waitFor(t, "every message handled", func() bool { mu.Lock(); defer mu.Unlock(); return len(seen) >= total })
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	for i, k := range seen {
		if want := fmt.Sprintf("%s-%04d", q, i); k != want {
			t.Fatalf("handler %d saw %s, want %s", i, k, want)
		}
	}
	if n := b.ready(q); n != 0 {
		t.Fatalf("%d messages left", n)
	}
}

// spy records every delivery the pipeline sees, as its key function.
type spy struct {
	mu   sync.Mutex
	seen []receiver.Message
}

func (s *spy) key(m *receiver.Message) (string, error) {
	s.mu.Lock()
	s.seen = append(s.seen, *m)
	s.mu.Unlock()
	return m.Key, nil
}

func (s *spy) redelivered(key string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, m := range s.seen {
		if m.Key == key && m.Redelivered {
			n++
		}
	}
	return n
}

// TestBlockedTagNotCovered: the first delivery's handler blocks while the
// other 49 of the prefetch window finish. Their successes may not be
// acknowledged with a multiple ack covering the first: a connection cut
// then must bring the first back (redelivered), and every message is
// applied exactly once, none lost. The consumer runs a prebuilt Receiver
// (so its own gate bounds the handlers) with a key function that sees
// every delivery.
func TestBlockedTagNotCovered(t *testing.T) {
	t.Parallel()
	const total, prefetch, concurrency = 50, 50, 4
	b := newBroker(t)
	q := b.queue("msgaudit-blocked-")
	px := newProxy(t, b.hostPort(), nil)
	key := func(i int) string { return fmt.Sprintf("%s-%04d", q, i) }
	b.publishMany(q, total, func(i int) amqp.Publishing { return amqp.Publishing{MessageId: key(i)} })
	store := memStore(t, idempotency.Options{})
	defer store.Close()
	sp := &spy{}
	release := make(chan struct{})
	var running, peak atomic.Int32
	var mu sync.Mutex
	applied := map[string]int{}
	h := func(ctx context.Context, m *receiver.Message) error {
		n := running.Add(1)
		defer running.Add(-1)
		for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
		}
		if m.Key == key(0) && !m.Redelivered {
			blockUntil(ctx, t, release, time.Minute, "the test to release the first delivery")
		}
		mu.Lock()
		applied[m.Key]++
		mu.Unlock()
		return nil
	}
	c, err := New(Config{URL: b.via("amqp", px.Addr()), Queue: q, Handler: h, Prefetch: prefetch,
		Pipeline:    receiver.Config{Store: store, Namespace: q, KeyFunc: sp.key},
		Concurrency: concurrency, ReconnectBackoff: receiver.Backoff{Initial: 10 * time.Millisecond, Max: 100 * time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	stop := runConsumer(t, c)
	waitFor(t, "the other 49 handlers finishing", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(applied) == total-1
	})
	// Let the acknowledgements that may go out go out, then cut.
	time.Sleep(100 * time.Millisecond)
	if px.Cut() == 0 {
		t.Fatal("no connection to cut")
	}
	waitFor(t, "the first delivery coming back", func() bool { return sp.redelivered(key(0)) > 0 })
	close(release)
	waitFor(t, "every message applied", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(applied) == total
	})
	waitFor(t, "the queue empty", func() bool { return b.ready(q) == 0 })
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if n := b.ready(q); n != 0 {
		t.Fatalf("%d messages left after the stop", n)
	}
	mu.Lock()
	defer mu.Unlock()
	for k, n := range applied {
		if n != 1 {
			t.Errorf("%s applied %d times", k, n)
		}
	}
	if p := peak.Load(); p > concurrency {
		t.Errorf("%d handlers ran at once; Concurrency is %d", p, concurrency)
	}
	st := c.Stats()
	var redelivered []string
	sp.mu.Lock()
	for _, m := range sp.seen {
		if m.Redelivered && !slices.Contains(redelivered, m.Key) {
			redelivered = append(redelivered, m.Key)
		}
	}
	sp.mu.Unlock()
	t.Logf("acks %d stale %d dropped %d reconnects %d; redelivered after the cut: %d keys", st.Acks, st.StaleAcks, st.Dropped, st.Reconnects, len(redelivered))
}

// TestGracefulStopInFlight: with deliveries claimed ahead of busy
// handlers, a graceful stop lets the running handlers finish and
// acknowledges them, hands the claimed-ahead ones back without running
// them, and releases their claims, so that a second consumer on the same
// store applies every one of them once.
func TestGracefulStopInFlight(t *testing.T) {
	t.Parallel()
	const total, concurrency = 20, 2
	b := newBroker(t)
	q := b.queue("msgaudit-gsif-")
	b.publishMany(q, total, func(i int) amqp.Publishing { return amqp.Publishing{MessageId: fmt.Sprintf("%s-%04d", q, i)} })
	store := memStore(t, idempotency.Options{})
	defer store.Close()
	release := make(chan struct{})
	started := make(chan string, total)
	var mu sync.Mutex
	applied := map[string]int{}
	h := func(ctx context.Context, m *receiver.Message) error {
		started <- m.Key
		blockUntil(ctx, t, release, time.Minute, "the test to release the running handlers")
		mu.Lock()
		applied[m.Key]++
		mu.Unlock()
		return nil
	}
	c, err := New(Config{URL: b.url, Queue: q, Handler: h, Prefetch: total, Concurrency: concurrency, Pipeline: receiver.Config{Store: store}})
	if err != nil {
		t.Fatal(err)
	}
	stop := runConsumer(t, c)
	for range concurrency {
		recv(t, started, 30*time.Second, "a handler starting")
	}
	waitFor(t, "the prefetch window delivered", func() bool { return b.ready(q) == 0 })
	// Every delivery not running is claimed ahead (waiting at the gate).
	waitFor(t, "the window claimed", func() bool { return c.Metrics().Snapshot().Delivered == total })
	stopped := make(chan error, 1)
	go func() { stopped <- stop() }()
	waitFor(t, "the claimed-ahead deliveries handed back", func() bool { return b.ready(q) == total-concurrency })
	close(release)
	if err := recv(t, stopped, time.Minute, "the graceful stop"); err != nil {
		t.Fatal(err)
	}
	st := c.Stats()
	if st.Acks != concurrency || st.Dropped != total-concurrency || st.Requeues != 0 {
		t.Fatalf("stats %+v; want %d acks, %d dropped", st, concurrency, total-concurrency)
	}
	if n := b.ready(q); n != total-concurrency {
		t.Fatalf("%d ready after the stop, want %d", n, total-concurrency)
	}
	// A second consumer over the same store: the handed-back deliveries'
	// claims were released, so each runs now, once.
	c2, err := New(Config{
		URL:         b.url,
		Queue:       q,
		Concurrency: concurrency,
		Handler: func(_ context.Context, m *receiver.Message) error {
			mu.Lock()
			applied[m.Key]++
			mu.Unlock()
			return nil
		},
		Pipeline: receiver.Config{Store: store}})
	if err != nil {
		t.Fatal(err)
	}
	stop2 := runConsumer(t, c2)
	waitFor(t, "every message applied", func() bool { mu.Lock(); defer mu.Unlock(); return len(applied) == total })
	if err := stop2(); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	for k, n := range applied {
		if n != 1 {
			t.Errorf("%s applied %d times", k, n)
		}
	}
	if m := c2.Metrics().Snapshot(); m.Duplicates() != 0 || m.Processed != total-concurrency {
		t.Errorf("second consumer %+v: the handed-back deliveries should be new work", m)
	}
}
