package stompconsumer

import (
	"context"
	"errors"
	"github.com/acemq/msgaudit/internal/testkit/logbuf"
	"sync/atomic"
	"testing"
	"time"

	"github.com/acemq/msgaudit/receiver"
)

// TestCutWhileHandlerRuns pins the connection-loss trap: message "0"'s
// handler is still running when its connection is cut. The broker
// redelivers it (and every prefetched message) on the new connection at
// once. The redelivery must not run while the original's outcome is
// unknown, and the original's ACK must not be sent anywhere (its ack id
// died with its connection). If the original succeeds, the redelivery is
// acknowledged as a duplicate; if it fails, the redelivery runs.
func TestCutWhileHandlerRuns(t *testing.T) {
	addr := stompAddr(t)
	for _, tt := range []struct {
		name    string
		fail    bool
		wantDup uint64
	}{{"original-succeeds", false, 1}, {"original-fails", true, 0}} {
		t.Run(tt.name, func(t *testing.T) {
			q := "/queue/" + uniq("msgaudit.cut")
			tag := uniq("tag")
			const n = 5
			produce(t, addr, q, tag, n, nil)
			px := newProxy(t, addr)
			l := newLedger()
			started, release := make(chan struct{}), make(chan struct{})
			var runs0 atomic.Int64
			h := l.handler(0, 0)
			var logs logbuf.Buffer
			t.Cleanup(func() {
				if t.Failed() {
					t.Logf("the consumer's log:\n%s", logs.String())
				}
			})
			// Two workers: one holds the redelivery of "0" while it waits
			// for the original, the other handles the rest.
			c, err := New(Config{
				Addresses:             []string{px.Addr()},
				Prefetch:              n,
				Concurrency:           2,
				DeadLetterDestination: noDeadLetters(t, addr),
				ReconnectBackoff:      receiver.Backoff{Initial: time.Millisecond, Max: 10 * time.Millisecond},
				Subscriptions: []Subscription{{Destination: q, Handler: func(ctx context.Context, m *receiver.Message) error {
					if string(m.Body) == "0" {
						if runs0.Add(1) == 1 {
							close(started)
							blockUntil(ctx, t, release, 60*time.Second, "the test to release message 0's first handler")
							if tt.fail {
								return errors.New("failed after the cut")
							}
						}
					}
					return h(ctx, m)
				}}},
				Pipeline: receiver.Config{MemoryOnly: true, Logger: debugLogger(&logs), Backoff: receiver.Backoff{Initial: time.Millisecond, Max: 5 * time.Millisecond}}})
			if err != nil {
				t.Fatal(err)
			}
			stop := runConsumer(t, c)
			recv(t, started, 30*time.Second, "message 0's handler to start")
			if px.Cut() != 1 {
				t.Fatal("no live connection to cut")
			}
			waitFor(t, 20*time.Second, "reconnect", func() bool { return c.Stats().Reconnects == 1 })
			waitFor(t, 20*time.Second, "the other messages", func() bool { return l.count() == n-1 })
			// The redelivery of "0" is waiting for its in-flight original.
			l.mu.Lock()
			early := l.applied["0"]
			l.mu.Unlock()
			if early != 0 {
				t.Fatal("message 0 applied while its original was still running")
			}
			close(release)
			waitFor(t, 20*time.Second, "message 0", func() bool { return l.count() == n })
			if err := stop(); err != nil {
				t.Fatal(err)
			}
			l.verify(t, n)
			s, m := c.Stats(), c.Metrics().Snapshot()
			if s.StaleAcks != 1 || s.RetriesSent != 0 {
				t.Errorf("stale acks %d (want 1: the original's settlement after the cut), retry copies %d (want 0)", s.StaleAcks, s.RetriesSent)
			}
			if m.DuplicatesInFlight != tt.wantDup {
				t.Errorf("in-flight duplicates %d, want %d", m.DuplicatesInFlight, tt.wantDup)
			}
			wantRuns := int64(1)
			if tt.fail {
				wantRuns = 2
			}
			if got := runs0.Load(); got != wantRuns {
				t.Errorf("handler of message 0 ran %d times, want %d", got, wantRuns)
			}
			if left := drain(t, addr, q, 300*time.Millisecond); len(left) != 0 {
				t.Errorf("queue not empty: %v", left)
			}
			checkBrokerDLQ(t, addr, q)
			t.Logf("stats %+v", s)
		})
	}
}

// TestCutDropsPrefetched: a cut while many prefetched deliveries are still
// queued behind a slow handler. The broker redelivers every one of them;
// they were never processed, so they must not look like duplicates of
// themselves: none may have left a mark in the audit (the audit is
// checked when a delivery is processed, and a dropped one never was).
// Without a store nothing else would notice such a mark, so every message
// must be applied exactly once through the audit alone.
func TestCutDropsPrefetched(t *testing.T) {
	addr := stompAddr(t)
	q := "/queue/" + uniq("msgaudit.cutprefetch")
	dlq := "/queue/" + uniq("msgaudit.cutprefetch.dlq")
	tag := uniq("tag")
	const n, cutAt = 400, 20
	produce(t, addr, q, tag, n, nil)
	px := newProxy(t, addr)
	l := newLedger()
	h := l.handler(0, 0)
	c, err := New(Config{
		Addresses:             []string{px.Addr()},
		Prefetch:              n,
		Concurrency:           1,
		DeadLetterDestination: dlq,
		ReconnectBackoff:      receiver.Backoff{Initial: time.Millisecond, Max: 10 * time.Millisecond},
		Subscriptions: []Subscription{{Destination: q, Handler: func(ctx context.Context, m *receiver.Message) error {
			time.Sleep(5 * time.Millisecond) // slow: the prefetched deliveries queue up behind it
			return h(ctx, m)
		}}},
		Pipeline: receiver.Config{MemoryOnly: true}})
	if err != nil {
		t.Fatal(err)
	}
	stop := runConsumer(t, c)
	// The broker sends the whole prefetch at once; the handler gets
	// through a few: the cut finds the rest queued.
	waitFor(t, 30*time.Second, "the first messages applied", func() bool { return l.count() >= cutAt })
	if px.Cut() != 1 {
		t.Fatal("no live connection to cut")
	}
	waitFor(t, 30*time.Second, "the reconnect after the cut", func() bool { return c.Stats().Reconnects >= 1 })
	// Not fatal when it runs out: verify and the counters below say what
	// went wrong (lost messages, redeliveries taken as duplicates).
	if !eventually(60*time.Second, func() bool { return l.count() >= n }) {
		t.Errorf("timed out after 60s: only %d of %d messages were applied after the cut", l.count(), n)
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	l.verify(t, n)
	s, m := c.Stats(), c.Metrics().Snapshot()
	if m.DuplicatesAudit >= s.Dropped {
		t.Errorf("%d redeliveries taken as audit duplicates, %d prefetched deliveries dropped: the dropped ones left a mark in the audit", m.DuplicatesAudit, s.Dropped)
	}
	if s.Dropped == 0 {
		t.Errorf("no prefetched delivery was dropped by the cut (stats %+v): the test did not test its case", s)
	}
	if left := drain(t, addr, q, 300*time.Millisecond); len(left) != 0 {
		t.Errorf("queue not empty: %d left", len(left))
	}
	if dl := drain(t, addr, dlq, 300*time.Millisecond); len(dl) != 0 {
		t.Errorf("dead-letter destination holds %d messages", len(dl))
	}
	checkBrokerDLQ(t, addr, q)
	t.Logf("dropped=%d delivered=%d redelivered=%d processed=%d dup(audit=%d in-flight=%d) stale-acks=%d reconnects=%d",
		s.Dropped, m.Delivered, m.Redelivered, m.Processed, m.DuplicatesAudit, m.DuplicatesInFlight, s.StaleAcks, s.Reconnects)
}
