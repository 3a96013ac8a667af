package stompconsumer

import (
	"context"
	"github.com/go-stomp/stomp/v3/frame"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/acemq/msgaudit/receiver"
)

// TestDuplicatePolicies sends one message twice under the same producer
// key (as a producer retrying after a lost receipt does) and checks what
// each duplicate policy does with the second copy.
func TestDuplicatePolicies(t *testing.T) {
	addr := stompAddr(t)
	tests := []struct {
		name       string
		policy     receiver.DuplicatePolicy
		wantCalls  int
		wantDLQ    int
		wantHooked int
	}{
		{"drop", receiver.DuplicateDrop, 1, 0, 0},
		{"dead-letter", receiver.DuplicateDeadLetter, 1, 1, 0},
		{"deliver-marked", receiver.DuplicateDeliver, 2, 0, 0},
		{"hook", receiver.DuplicateHook, 1, 0, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			q := "/queue/" + uniq("msgaudit.dup")
			dlq := "/queue/" + uniq("msgaudit.dup.dlq")
			tag := uniq("tag")
			produce(t, addr, q, tag, 3, func(i int) map[string]string {
				if i == 2 {
					return map[string]string{"x-idem-key": "producer-B:8"}
				}
				return map[string]string{"x-idem-key": "producer-B:7"} // 0 and 1 are one message
			})
			var mu sync.Mutex
			var calls []bool // Duplicate flag per call on key 7
			var hooked atomic.Int64
			var done atomic.Int64
			c, err := New(Config{MemoryOnly: true, Addresses: []string{addr}, KeyHeader: "x-idem-key", DuplicatePolicy: tt.policy,
				DeadLetterDestination: dlq,
				OnDuplicate: func(_ context.Context, m *receiver.Message, reason string) {
					if tt.policy == receiver.DuplicateHook {
						hooked.Add(1)
					}
				},
				Subscriptions: []Subscription{{Destination: q, Handler: func(_ context.Context, m *receiver.Message) error {
					if m.Header("x-idem-key") == "producer-B:7" {
						mu.Lock()
						calls = append(calls, m.Duplicate)
						mu.Unlock()
					}
					done.Add(1)
					return nil
				}}}})
			if err != nil {
				t.Fatal(err)
			}
			stop := runConsumer(t, c)
			waitFor(t, 20*time.Second, "all three deliveries settled", func() bool {
				m := c.Metrics().Snapshot()
				return m.Processed+m.Duplicates() >= 3
			})
			if err := stop(); err != nil {
				t.Fatal(err)
			}
			mu.Lock()
			defer mu.Unlock()
			if len(calls) != tt.wantCalls {
				t.Errorf("handler ran %d times for the duplicated message, want %d", len(calls), tt.wantCalls)
			}
			if tt.wantCalls == 2 && (calls[0] || !calls[1]) {
				t.Errorf("Duplicate flags %v, want [false true]", calls)
			}
			if got := hooked.Load(); got != int64(tt.wantHooked) {
				t.Errorf("OnDuplicate ran %d times, want %d", got, tt.wantHooked)
			}
			dl := drain(t, addr, dlq, "", 300*time.Millisecond)
			if len(dl) != tt.wantDLQ {
				t.Errorf("dead-letter destination holds %d, want %d", len(dl), tt.wantDLQ)
			}
			for _, h := range dl {
				if !strings.HasPrefix(h[receiver.HeaderDeadLetterReason], "duplicate:") || h["x-idem-key"] != "producer-B:7" {
					t.Errorf("dead letter %v", h)
				}
			}
			if m := c.Metrics().Snapshot(); m.Duplicates() != 1 {
				t.Errorf("duplicates counted %d, want 1 (%+v)", m.Duplicates(), m)
			}
			if left := drain(t, addr, q, "", 300*time.Millisecond); len(left) != 0 {
				t.Errorf("queue not empty: %v", left)
			}
			checkBrokerDLQ(t, addr, tag)
		})
	}
}

// TestOversizedFrames: frames over MaxBodyBytes or MaxHeaderBytes are cut
// by the limiter and returned with NACK, which ActiveMQ turns into a move
// of the full, persistent message to its dead-letter queue (the test
// broker keeps one per queue: /queue/DLQ.<name>); the consumer keeps
// going and the other messages are applied.
func TestOversizedFrames(t *testing.T) {
	addr := stompAddr(t)
	q := "/queue/" + uniq("msgaudit.big")
	tag := uniq("tag")
	big := strings.Repeat("b", 20<<10)
	p := rawDial(t, addr)
	send := func(body string, hdr ...string) {
		opts := []func(*frame.Frame) error{stompHeader("persistent", "true"), stompHeader(testTag, tag)}
		for i := 0; i+1 < len(hdr); i += 2 {
			opts = append(opts, stompHeader(hdr[i], hdr[i+1]))
		}
		if err := p.Send(q, "text/plain", []byte(body), opts...); err != nil {
			t.Fatal(err)
		}
	}
	send("small-1")
	send(big)
	send("small-2")
	send("hdr", "x-fat", strings.Repeat("h", 4<<10))
	send("small-3")
	if err := p.Disconnect(); err != nil {
		t.Fatal(err)
	}
	l := newLedger()
	c, err := New(Config{MemoryOnly: true, Addresses: []string{addr}, MaxBodyBytes: 8 << 10, MaxHeaderBytes: 2 << 10,
		DeadLetterDestination: "/queue/" + uniq("msgaudit.big.dlq"),
		Subscriptions:         []Subscription{{Destination: q, Handler: l.handler(0, 0)}}})
	if err != nil {
		t.Fatal(err)
	}
	stop := runConsumer(t, c)
	waitFor(t, 20*time.Second, "small messages applied and big ones returned", func() bool {
		return l.count() >= 3 && c.Stats().Oversized >= 2
	})
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	for _, b := range []string{"small-1", "small-2", "small-3"} {
		if l.applied[b] != 1 {
			t.Errorf("%s applied %d times", b, l.applied[b])
		}
	}
	if l.count() != 3 {
		t.Errorf("applied %v", l.applied)
	}
	// ActiveMQ moved the full messages to the queue's DLQ (this also
	// removes them).
	brokerDLQ := "/queue/DLQ." + strings.TrimPrefix(q, "/queue/")
	dl := drain(t, addr, brokerDLQ, testTag+" = '"+tag+"'", 2*time.Second)
	bodies := map[string]bool{}
	for _, h := range dl {
		bodies[h["body"]] = true
		if h["original-destination"] != q {
			t.Errorf("DLQ copy from %q, want %q", h["original-destination"], q)
		}
	}
	if len(dl) != 2 || !bodies[big] || !bodies["hdr"] {
		t.Errorf("%s holds %d of our messages (full big body: %v, fat header: %v)", brokerDLQ, len(dl), bodies[big], bodies["hdr"])
	}
	if left := drain(t, addr, q, "", 300*time.Millisecond); len(left) != 0 {
		t.Errorf("queue not empty: %d", len(left))
	}
}
