package stompconsumer

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/acemq/msgaudit/receiver"
)

// TestGracefulStop: Run's context is cancelled while handlers are running.
// Run must let them finish and acknowledge them before UNSUBSCRIBE (an ACK
// after UNSUBSCRIBE is silently ignored by ActiveMQ): afterwards the queue
// holds exactly the messages that were not applied.
func TestGracefulStop(t *testing.T) {
	addr := stompAddr(t)
	q := "/queue/" + uniq("msgaudit.stop")
	tag := uniq("tag")
	const n = 20
	produce(t, addr, q, tag, n, nil)
	l := newLedger()
	var running atomic.Int64
	inflight := make(chan struct{}, n)
	h := l.handler(0, 0)
	c, err := New(Config{MemoryOnly: true, Addresses: []string{addr}, Prefetch: n, Concurrency: 3, DeadLetterDestination: noDeadLetters(t, addr),
		Subscriptions: []Subscription{{Destination: q, Handler: func(ctx context.Context, m *receiver.Message) error {
			running.Add(1)
			defer running.Add(-1)
			inflight <- struct{}{}
			time.Sleep(150 * time.Millisecond) // still running when Run is cancelled
			return h(ctx, m)
		}}}})
	if err != nil {
		t.Fatal(err)
	}
	stop := runConsumer(t, c)
	for i := range 4 {
		recv(t, inflight, 30*time.Second, fmt.Sprintf("handler %d of 4 to start", i+1))
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if r := running.Load(); r != 0 {
		t.Fatalf("%d handlers still running after Run returned", r)
	}
	applied := l.count()
	if applied < 4 || applied == n {
		t.Fatalf("applied %d of %d: the stop did not land mid-run", applied, n)
	}
	left := drain(t, addr, q, 500*time.Millisecond)
	l.mu.Lock()
	for _, h := range left {
		if l.applied[h["body"]] != 0 {
			t.Errorf("message %s was applied but is still on the queue (its ACK was lost)", h["body"])
		}
	}
	l.mu.Unlock()
	if applied+len(left) != n {
		t.Errorf("applied %d + left %d != %d", applied, len(left), n)
	}
	if s := c.Stats(); s.StaleAcks != 0 || s.Dropped == 0 {
		t.Errorf("stats %+v: want no stale acks and some dropped (prefetched, not started) deliveries", s)
	}
	checkBrokerDLQ(t, addr, q)
}

// TestFailover: the first broker address goes away (its connections are
// cut and new ones refused); the consumer moves to the next address and
// finishes the queue.
func TestFailover(t *testing.T) {
	addr := stompAddr(t)
	q := "/queue/" + uniq("msgaudit.failover")
	tag := uniq("tag")
	const n = 300
	produce(t, addr, q, tag, n, nil)
	a, b := newProxy(t, addr), newProxy(t, addr)
	l := newLedger()
	l.delay = time.Millisecond
	c, err := New(Config{MemoryOnly: true, Addresses: []string{"tcp://" + a.Addr(), b.Addr()}, Prefetch: 20, DeadLetterDestination: noDeadLetters(t, addr),
		ReconnectBackoff: Backoff{Initial: time.Millisecond, Max: 20 * time.Millisecond},
		Subscriptions:    []Subscription{{Destination: q, Handler: l.handler(0, 0)}}})
	if err != nil {
		t.Fatal(err)
	}
	stop := runConsumer(t, c)
	waitFor(t, 20*time.Second, "progress on the first address", func() bool { return l.count() >= n/3 })
	if b.Live() != 0 {
		t.Fatal("connected to the second address too early")
	}
	a.SetDown(true)
	a.Cut()
	waitFor(t, 30*time.Second, "all messages", func() bool { return l.count() >= n })
	if b.Live() != 1 || a.Live() != 0 {
		t.Errorf("live connections: first %d, second %d; want 0, 1", a.Live(), b.Live())
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	l.verify(t, n)
	if s := c.Stats(); s.Reconnects != 1 || s.Connects != 2 {
		t.Errorf("stats %+v, want one reconnect", s)
	}
	if left := drain(t, addr, q, 300*time.Millisecond); len(left) != 0 {
		t.Errorf("queue not empty: %d", len(left))
	}
	checkBrokerDLQ(t, addr, q)
}
