package stompconsumer

import (
	"testing"
	"time"

	"github.com/acemq/msgaudit/idempotency"
	"github.com/acemq/msgaudit/receiver"
)

// TestFaultsExactlyOnce is the main proof against real ActiveMQ: 5,000
// persistent messages, 10% handler failures (retried through resent
// copies, signed with a CopySecret both consumers share), three connection
// cuts mid-delivery through a TCP proxy and one consumer restart (a new
// Consumer sharing the durable store and the CopySecret). Every
// message must be applied exactly once, none lost, the queue and both
// DLQs empty at the end.
func TestFaultsExactlyOnce(t *testing.T) {
	addr := stompAddr(t)
	if testing.Short() {
		t.Skip("5,000 messages against ActiveMQ; skipped with -short")
	}
	const n = 5000
	q := "/queue/" + uniq("msgaudit.faults")
	dlq := "/queue/" + uniq("msgaudit.faults.dlq")
	tag := uniq("tag")
	start := time.Now()
	produce(t, addr, q, tag, n, nil)
	produced := time.Since(start)

	px := newProxy(t, addr)
	store := memStore(t, idempotency.Options{ClaimTTL: 30 * time.Second})
	l := newLedger()
	l.delay = time.Millisecond // so cuts catch handlers mid-run
	newConsumer := func() *Consumer {
		c, err := New(Config{
			Addresses:             []string{px.Addr()},
			CopySecret:            []byte("faults test copy secret, shared"),
			Subscriptions:         []Subscription{{Destination: q, Handler: l.handler(0.10, 0)}},
			Prefetch:              50,
			Concurrency:           4,
			ReconnectBackoff:      receiver.Backoff{Initial: 5 * time.Millisecond, Max: 50 * time.Millisecond},
			DeadLetterDestination: dlq,
			Pipeline:              receiver.Config{MaxAttempts: 12, Backoff: receiver.Backoff{Initial: time.Millisecond, Max: 20 * time.Millisecond}, Store: store},
		})
		if err != nil {
			t.Fatal(err)
		}
		return c
	}

	c1 := newConsumer()
	stop1 := runConsumer(t, c1)
	cuts := 0
	for _, at := range []int{800, 1800} {
		waitFor(t, 60*time.Second, "progress before a cut", func() bool { return l.count() >= at })
		if px.Cut() > 0 {
			cuts++
		}
	}
	waitFor(t, 60*time.Second, "progress before the restart", func() bool { return l.count() >= 2600 })
	if err := stop1(); err != nil {
		t.Fatalf("first consumer's Run: %v", err)
	}
	c2 := newConsumer()
	stop2 := runConsumer(t, c2)
	waitFor(t, 60*time.Second, "progress before the last cut", func() bool { return l.count() >= 3600 })
	if px.Cut() > 0 {
		cuts++
	}
	waitFor(t, 120*time.Second, "every message applied", func() bool { return l.count() >= n })
	if err := stop2(); err != nil {
		t.Fatalf("second consumer's Run: %v", err)
	}
	elapsed := time.Since(start)

	l.verify(t, n)
	if cuts != 3 {
		t.Errorf("cut %d live connections, want 3", cuts)
	}
	if left := drain(t, addr, q, 500*time.Millisecond); len(left) != 0 {
		t.Errorf("queue not empty: %d left, first %v", len(left), left[0])
	}
	if dl := drain(t, addr, dlq, 300*time.Millisecond); len(dl) != 0 {
		t.Errorf("dead-letter destination holds %d messages, first %v", len(dl), dl[0])
	}
	checkBrokerDLQ(t, addr, q)

	m1, m2 := c1.Metrics().Snapshot(), c2.Metrics().Snapshot()
	s1, s2 := c1.Stats(), c2.Stats()
	if s1.Reconnects+s2.Reconnects < 3 {
		t.Errorf("reconnects = %d, want >= 3", s1.Reconnects+s2.Reconnects)
	}
	if got := l.fails.Load(); got == 0 || s1.RetriesSent+s2.RetriesSent == 0 {
		t.Errorf("injected failures %d, retry copies %d: the retry path was not exercised", got, s1.RetriesSent+s2.RetriesSent)
	}
	t.Logf("messages=%d produced in %v; consumed with faults in %v (%.0f msg/s overall)", n, produced.Round(time.Millisecond),
		elapsed.Round(time.Millisecond), float64(n)/elapsed.Seconds())
	t.Logf("handler calls=%d injected failures=%d applied=%d", l.calls.Load(), l.fails.Load(), l.count())
	for i, x := range []struct {
		m receiver.Snapshot
		s receiver.TransportStats
	}{{m1, s1}, {m2, s2}} {
		t.Logf("consumer %d: delivered=%d redelivered=%d processed=%d dup(audit=%d store=%d in-flight=%d) retries=%d retry-copies=%d dead-lettered=%d reconnects=%d dropped=%d stale-acks=%d",
			i+1, x.m.Delivered, x.m.Redelivered, x.m.Processed, x.m.DuplicatesAudit, x.m.DuplicatesStore, x.m.DuplicatesInFlight,
			x.m.Retries, x.s.RetriesSent, x.m.DeadLettered, x.s.Reconnects, x.s.Dropped, x.s.StaleAcks)
	}
}
