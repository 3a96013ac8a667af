package stompconsumer

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/acemq/msgaudit/idempotency"
	"github.com/acemq/msgaudit/internal/copyhdr"
	"github.com/acemq/msgaudit/receiver"
	"github.com/redis/go-redis/v9"
)

// redisStore opens the shared Redis store (MSGAUDIT_REDIS_URL) under a
// prefix unique to the test, and deletes its keys at the end.
func redisStore(t *testing.T) idempotency.Store {
	t.Helper()
	url := envOrSkip(t, "MSGAUDIT_REDIS_URL", "Redis")
	prefix := uniq("msgaudit-stomp-test") + ":"
	sep := "?"
	if strings.Contains(url, "?") {
		sep = "&"
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := idempotency.Open(ctx, url+sep+"msgaudit_prefix="+prefix, idempotency.Options{ClaimTTL: 30 * time.Second, Retention: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		s.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		opt, err := redis.ParseURL(url)
		if err != nil {
			return
		}
		c := redis.NewClient(opt)
		defer c.Close()
		keys, _ := c.Keys(ctx, prefix+"*").Result()
		if len(keys) > 0 {
			c.Del(ctx, keys...)
		}
	})
	return s
}

// TestCompetingConsumersSharedStore: two consumers (separate audits, as on
// two machines) compete for one queue and share a Redis store; one of them
// loses its connection twice, so its in-flight and prefetched messages are
// redelivered to either. Each message is applied once.
func TestCompetingConsumersSharedStore(t *testing.T) {
	addr := stompAddr(t)
	store := redisStore(t)
	const n = 2000
	q := "/queue/" + uniq("msgaudit.compete")
	dlq := "/queue/" + uniq("msgaudit.compete.dlq")
	tag := uniq("tag")
	produce(t, addr, q, tag, n, nil)

	l := newLedger()
	l.delay = 2 * time.Millisecond
	var perConsumer [2]atomic.Int64
	var consumers []*Consumer
	var proxies []*proxy
	for i := range 2 {
		px := newProxy(t, addr)
		h := l.handler(0.1, 0)
		c, err := New(Config{
			Addresses: []string{px.Addr()},
			Subscriptions: []Subscription{{Destination: q, Handler: func(ctx context.Context, m *receiver.Message) error {
				err := h(ctx, m)
				if err == nil {
					perConsumer[i].Add(1)
				}
				return err
			}}},
			Prefetch:              20,
			Concurrency:           2,
			DeadLetterDestination: dlq,
			ReconnectBackoff:      receiver.Backoff{Initial: 5 * time.Millisecond, Max: 50 * time.Millisecond},
			Pipeline:              receiver.Config{MaxAttempts: 12, Store: store, Backoff: receiver.Backoff{Initial: time.Millisecond, Max: 20 * time.Millisecond}},
		})
		if err != nil {
			t.Fatal(err)
		}
		consumers = append(consumers, c)
		proxies = append(proxies, px)
	}
	var stops []func() error
	for _, c := range consumers {
		stops = append(stops, runConsumer(t, c))
	}
	for _, at := range []int{n / 4, n / 2} {
		waitFor(t, 60*time.Second, "progress", func() bool { return l.count() >= at })
		proxies[0].Cut()
	}
	waitFor(t, 120*time.Second, "every message applied", func() bool { return l.count() >= n })
	for _, stop := range stops {
		if err := stop(); err != nil {
			t.Fatal(err)
		}
	}
	l.verify(t, n)
	if left := drain(t, addr, q, 500*time.Millisecond); len(left) != 0 {
		t.Errorf("queue not empty: %d left", len(left))
	}
	if dl := drain(t, addr, dlq, 300*time.Millisecond); len(dl) != 0 {
		t.Errorf("dead-letter destination holds %d messages", len(dl))
	}
	checkBrokerDLQ(t, addr, q)
	if perConsumer[0].Load() == 0 || perConsumer[1].Load() == 0 {
		t.Errorf("no competition: consumer A applied %d, B %d", perConsumer[0].Load(), perConsumer[1].Load())
	}
	for i, c := range consumers {
		m, s := c.Metrics().Snapshot(), c.Stats()
		t.Logf("consumer %c: applied=%d delivered=%d redelivered=%d dup(audit=%d store=%d in-flight=%d) retry-copies=%d reconnects=%d dropped=%d stale-acks=%d",
			'A'+i, perConsumer[i].Load(), m.Delivered, m.Redelivered, m.DuplicatesAudit, m.DuplicatesStore, m.DuplicatesInFlight,
			s.RetriesSent, s.Reconnects, s.Dropped, s.StaleAcks)
	}
}

// TestTopicSubscribers: every subscriber of a topic gets every message
// exactly once — two subscriptions (distinct names) in one consumer, which
// share its audit, and a second consumer. Handler failures are retried in
// place (a copy sent to the topic would reach everyone).
func TestTopicSubscribers(t *testing.T) {
	addr := stompAddr(t)
	topic := "/topic/" + uniq("msgaudit.topic")
	tag := uniq("tag")
	const n = 300
	ledgers := []*ledger{newLedger(), newLedger(), newLedger()}
	var probes [3]atomic.Int64
	handler := func(i int) receiver.Handler {
		h := ledgers[i].handler(0.1, 0)
		return func(ctx context.Context, m *receiver.Message) error {
			if m.Header("probe") != "" {
				probes[i].Add(1)
				return nil
			}
			return h(ctx, m)
		}
	}
	backoff := receiver.Backoff{Initial: time.Millisecond, Max: 10 * time.Millisecond}
	x, err := New(Config{
		Addresses:             []string{addr},
		DeadLetterDestination: noDeadLetters(t, addr),
		Subscriptions: []Subscription{
			{Destination: topic, Name: "sub-a", Handler: handler(0)},
			{Destination: topic, Name: "sub-b", Handler: handler(1), Concurrency: 3},
		},
		Pipeline: receiver.Config{MemoryOnly: true, MaxAttempts: 12, Backoff: backoff}})
	if err != nil {
		t.Fatal(err)
	}
	y, err := New(Config{
		Addresses:             []string{addr},
		DeadLetterDestination: noDeadLetters(t, addr),
		Subscriptions:         []Subscription{{Destination: topic, Handler: handler(2)}},
		Pipeline:              receiver.Config{MemoryOnly: true, MaxAttempts: 12, Backoff: backoff}})
	if err != nil {
		t.Fatal(err)
	}
	stopX, stopY := runConsumer(t, x), runConsumer(t, y)

	// A non-durable topic subscription only sees what is sent after the
	// broker registered it: probe until every subscriber saw a probe.
	p := rawDial(t, addr)
	defer p.Disconnect()
	waitFor(t, 30*time.Second, "all subscribers registered", func() bool {
		_ = p.Send(topic, "text/plain", []byte("probe"), stompHeader("probe", "1"))
		time.Sleep(20 * time.Millisecond)
		return probes[0].Load() > 0 && probes[1].Load() > 0 && probes[2].Load() > 0
	})
	produce(t, addr, topic, tag, n, nil)
	for i, l := range ledgers {
		waitFor(t, 60*time.Second, fmt.Sprintf("subscriber %d complete", i), func() bool { return l.count() >= n })
	}
	if err := stopX(); err != nil {
		t.Fatal(err)
	}
	if err := stopY(); err != nil {
		t.Fatal(err)
	}
	fails := int64(0)
	for i, l := range ledgers {
		t.Run(fmt.Sprintf("subscriber=%d", i), func(t *testing.T) { l.verify(t, n) })
		fails += l.fails.Load()
	}
	if fails == 0 || x.Stats().LocalRetries+y.Stats().LocalRetries == 0 {
		t.Errorf("the in-place retry path was not exercised: failures %d, stats %+v %+v", fails, x.Stats(), y.Stats())
	}
	if s := x.Stats().RetriesSent + y.Stats().RetriesSent; s != 0 {
		t.Errorf("%d retry copies sent to a topic", s)
	}
}

// TestDeadLetterPaths: a delivery without the configured key header, one
// whose key the audit cannot parse, and one whose handler always fails end
// up on the dead-letter destination with their reason, body and
// original headers; everything else is applied once and the queue is
// empty.
func TestDeadLetterPaths(t *testing.T) {
	addr := stompAddr(t)
	q := "/queue/" + uniq("msgaudit.bad")
	dlq := "/queue/" + uniq("msgaudit.bad.dlq")
	tag := uniq("tag")
	const n = 30
	produce(t, addr, q, tag, n, func(i int) map[string]string {
		switch i {
		case 3, 17:
			return nil // no key header
		case 5:
			return map[string]string{"x-idem-key": "not-an-audit-id"} // no ":seq"
		}
		return map[string]string{"x-idem-key": fmt.Sprintf("producer-A:%d", i+1)}
	})
	l := newLedger()
	var poisonCalls atomic.Int64
	h := l.handler(0, 0)
	c, err := New(Config{
		Addresses:             []string{addr},
		KeyHeader:             "x-idem-key",
		DeadLetterDestination: dlq,
		Subscriptions: []Subscription{{Destination: q, Handler: func(ctx context.Context, m *receiver.Message) error {
			if string(m.Body) == "11" {
				poisonCalls.Add(1)
				return fmt.Errorf("cannot apply message 11")
			}
			return h(ctx, m)
		}}},
		Pipeline: receiver.Config{MemoryOnly: true, MaxAttempts: 3, Backoff: receiver.Backoff{Initial: time.Millisecond, Max: 5 * time.Millisecond}}})
	if err != nil {
		t.Fatal(err)
	}
	stop := runConsumer(t, c)
	waitFor(t, 30*time.Second, "good messages applied", func() bool { return l.count() >= n-4 })
	waitFor(t, 30*time.Second, "dead letters sent", func() bool { return c.Stats().DeadLetters >= 4 })
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	dl := drain(t, addr, dlq, 500*time.Millisecond)
	got := map[string]map[string]string{}
	for _, h := range dl {
		got[h["body"]] = h
	}
	want := map[string]string{"3": "missing-key", "17": "missing-key", "5": "malformed-key", "11": "max-attempts"}
	if len(dl) != len(want) {
		t.Errorf("dead-letter destination holds %d messages, want %d: %v", len(dl), len(want), dl)
	}
	for body, reason := range want {
		h, ok := got[body]
		if !ok {
			t.Errorf("message %s was not dead-lettered", body)
			continue
		}
		if !strings.HasPrefix(h[copyhdr.DeadLetterReason], reason) {
			t.Errorf("message %s: reason %q, want %s", body, h[copyhdr.DeadLetterReason], reason)
		}
		if h[HeaderOriginalDestination] != q || h[testTag] != tag || h["persistent"] != "true" {
			t.Errorf("message %s: headers not carried: %v", body, h)
		}
	}
	if h := got["11"]; h != nil && h[copyhdr.Attempts] != "3" {
		t.Errorf("max-attempts dead letter carries %s=%q, want 3", copyhdr.Attempts, h[copyhdr.Attempts])
	}
	if p := poisonCalls.Load(); p != 3 {
		t.Errorf("the failing handler ran %d times, want MaxAttempts = 3", p)
	}
	l.mu.Lock()
	for _, b := range []string{"3", "5", "11", "17"} {
		if l.applied[b] != 0 {
			t.Errorf("message %s was applied", b)
		}
	}
	l.mu.Unlock()
	if len(l.doubles) != 0 || l.count() != n-4 {
		t.Errorf("applied %d (doubles %v), want %d", l.count(), l.doubles, n-4)
	}
	if left := drain(t, addr, q, 300*time.Millisecond); len(left) != 0 {
		t.Errorf("queue not empty: %v", left)
	}
	checkBrokerDLQ(t, addr, q)
}

// TestHandlerPanics: a handler that panics on the first attempt of every
// message never takes the consumer down; every message is retried and
// applied once: in place by default, through a copy with a CopySecret.
func TestHandlerPanics(t *testing.T) {
	for _, copies := range []bool{false, true} {
		name := "in place"
		if copies {
			name = "copies"
		}
		t.Run(name, func(t *testing.T) {
			addr := stompAddr(t)
			q := "/queue/" + uniq("msgaudit.panic")
			tag := uniq("tag")
			const n = 100
			produce(t, addr, q, tag, n, nil)
			l := newLedger()
			var mu sync.Mutex
			seen := map[string]bool{}
			var secret []byte
			if copies {
				secret = []byte("handler-panics copy secret")
			}
			c, err := New(Config{
				Addresses:             []string{addr},
				Concurrency:           4,
				CopySecret:            secret,
				DeadLetterDestination: noDeadLetters(t, addr),
				Subscriptions: []Subscription{{Destination: q, Handler: func(ctx context.Context, m *receiver.Message) error {
					mu.Lock()
					first := !seen[string(m.Body)]
					seen[string(m.Body)] = true
					mu.Unlock()
					if first {
						panic("handler bug on " + string(m.Body))
					}
					l.apply(string(m.Body))
					return nil
				}}},
				Pipeline: receiver.Config{MemoryOnly: true, Backoff: receiver.Backoff{Initial: time.Millisecond, Max: 5 * time.Millisecond}}})
			if err != nil {
				t.Fatal(err)
			}
			stop := runConsumer(t, c)
			waitFor(t, 30*time.Second, "all applied", func() bool { return l.count() >= n })
			if err := stop(); err != nil {
				t.Fatal(err)
			}
			l.verify(t, n)
			m, s := c.Metrics().Snapshot(), c.Stats()
			wantCopies, wantInPlace := uint64(0), uint64(n)
			if copies {
				wantCopies, wantInPlace = n, 0
			}
			if m.Panics != n || s.RetriesSent != wantCopies || s.LocalRetries != wantInPlace {
				t.Errorf("panics %d, retry copies %d, retries in place %d; want %d, %d, %d", m.Panics, s.RetriesSent, s.LocalRetries, n, wantCopies, wantInPlace)
			}
			if left := drain(t, addr, q, 300*time.Millisecond); len(left) != 0 {
				t.Errorf("queue not empty: %d", len(left))
			}
			checkBrokerDLQ(t, addr, q)
		})
	}
}

// flakyStore fails every call while down is set.
type flakyStore struct {
	idempotency.Store
	down  atomic.Bool
	calls atomic.Int64
}

var errStoreDown = fmt.Errorf("store unreachable (injected)")

func (s *flakyStore) TryClaim(ctx context.Context, k idempotency.Key) (idempotency.Outcome, idempotency.Claim, error) {
	s.calls.Add(1)
	if s.down.Load() {
		return 0, idempotency.Claim{}, errStoreDown
	}
	return s.Store.TryClaim(ctx, k)
}

func (s *flakyStore) Confirm(ctx context.Context, c idempotency.Claim) error {
	if s.down.Load() {
		return errStoreDown
	}
	return s.Store.Confirm(ctx, c)
}

// TestStoreDown: while the store cannot answer, no handler runs and no
// delivery is acknowledged as done — each is retried in place, never
// copied (a copy another consumer cannot authenticate would be keyed by
// its own id and could apply a message twice); once the store is back
// every message is applied exactly once and nothing is dead-lettered.
func TestStoreDown(t *testing.T) {
	addr := stompAddr(t)
	q := "/queue/" + uniq("msgaudit.storedown")
	dlq := "/queue/" + uniq("msgaudit.storedown.dlq")
	tag := uniq("tag")
	const n = 40
	store := &flakyStore{Store: memStore(t, idempotency.Options{})}
	store.down.Store(true)
	l := newLedger()
	c, err := New(Config{
		Addresses:             []string{addr},
		Concurrency:           4,
		DeadLetterDestination: dlq,
		Subscriptions:         []Subscription{{Destination: q, Handler: l.handler(0, 0)}},
		Pipeline:              receiver.Config{Store: store, MaxAttempts: 2, Backoff: receiver.Backoff{Initial: 2 * time.Millisecond, Max: 50 * time.Millisecond}}})
	if err != nil {
		t.Fatal(err)
	}
	stop := runConsumer(t, c)
	produce(t, addr, q, tag, n, nil)
	waitFor(t, 30*time.Second, "retries in place while the store is down", func() bool { return c.Stats().LocalRetries >= 3*n })
	if sent := c.Stats().RetriesSent; sent != 0 {
		t.Fatalf("%d copies sent while the store was down; want retries in place only", sent)
	}
	if got := l.calls.Load(); got != 0 {
		t.Fatalf("the handler ran %d times while the store was down", got)
	}
	if m := c.Metrics().Snapshot(); m.Processed != 0 || m.StoreErrors == 0 {
		t.Fatalf("while down: processed %d (want 0), store errors %d", m.Processed, m.StoreErrors)
	}
	store.down.Store(false)
	waitFor(t, 60*time.Second, "all applied after the store came back", func() bool { return l.count() >= n })
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	l.verify(t, n)
	if dl := drain(t, addr, dlq, 300*time.Millisecond); len(dl) != 0 {
		t.Errorf("%d messages dead-lettered because the store was down", len(dl))
	}
	if left := drain(t, addr, q, 300*time.Millisecond); len(left) != 0 {
		t.Errorf("queue not empty: %d", len(left))
	}
	checkBrokerDLQ(t, addr, q)
	t.Logf("store calls %d, retries in place %d, copies %d, metrics %+v", store.calls.Load(), c.Stats().LocalRetries, c.Stats().RetriesSent, c.Metrics().Snapshot())
}
