package stompconsumer

import (
	"context"
	"errors"
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
			// Two workers: one holds the redelivery of "0" while it waits
			// for the original, the other handles the rest.
			c, err := New(Config{MemoryOnly: true, Addresses: []string{px.Addr()}, Prefetch: n, Concurrency: 2,
				ReconnectBackoff: Backoff{Initial: time.Millisecond, Max: 10 * time.Millisecond},
				RetryBackoff:     Backoff{Initial: time.Millisecond, Max: 5 * time.Millisecond},
				Subscriptions: []Subscription{{Destination: q, Handler: func(ctx context.Context, m *receiver.Message) error {
					if string(m.Body) == "0" {
						if runs0.Add(1) == 1 {
							close(started)
							<-release
							if tt.fail {
								return errors.New("failed after the cut")
							}
						}
					}
					return h(ctx, m)
				}}}})
			if err != nil {
				t.Fatal(err)
			}
			stop := runConsumer(t, c)
			<-started
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
			if left := drain(t, addr, q, "", 300*time.Millisecond); len(left) != 0 {
				t.Errorf("queue not empty: %v", left)
			}
			checkBrokerDLQ(t, addr, tag)
			t.Logf("stats %+v", s)
		})
	}
}
