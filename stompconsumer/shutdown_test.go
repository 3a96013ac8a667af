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
	c, err := New(Config{
		Addresses:             []string{addr},
		Prefetch:              n,
		Concurrency:           3,
		DeadLetterDestination: noDeadLetters(t, addr),
		Subscriptions: []Subscription{{Destination: q, Handler: func(ctx context.Context, m *receiver.Message) error {
			running.Add(1)
			defer running.Add(-1)
			inflight <- struct{}{}
			time.Sleep(150 * time.Millisecond) // still running when Run is cancelled
			return h(ctx, m)
		}}},
		Pipeline: receiver.Config{MemoryOnly: true}})
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
	c, err := New(Config{
		Addresses:             []string{"tcp://" + a.Addr(), b.Addr()},
		Prefetch:              20,
		DeadLetterDestination: noDeadLetters(t, addr),
		ReconnectBackoff:      receiver.Backoff{Initial: time.Millisecond, Max: 20 * time.Millisecond},
		Subscriptions:         []Subscription{{Destination: q, Handler: l.handler(0, 0)}},
		Pipeline:              receiver.Config{MemoryOnly: true}})
	if err != nil {
		t.Fatal(err)
	}
	stop := runConsumer(t, c)
	waitFor(t, 20*time.Second, "progress on one address", func() bool { return l.count() >= n/3 })
	// The consumer starts on the first address; when that attempt fails
	// (a loaded machine), it rotates to the second (TestConnectRotates),
	// and the address it is on is the one that goes away.
	on, next := a, b
	if a.Live() == 0 && b.Live() == 1 {
		t.Log("the first connection went to the second address; the failover goes the other way")
		on, next = b, a
	}
	if on.Live() != 1 || next.Live() != 0 {
		t.Fatalf("live connections: %d and %d; want one, on one address", on.Live(), next.Live())
	}
	on.SetDown(true)
	on.Cut()
	waitFor(t, 30*time.Second, "all messages", func() bool { return l.count() >= n })
	if next.Live() != 1 || on.Live() != 0 {
		t.Errorf("live connections: the address gone %d, the other %d; want 0, 1", on.Live(), next.Live())
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
