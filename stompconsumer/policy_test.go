package stompconsumer

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/acemq/msgaudit/internal/copyhdr"
	"github.com/acemq/msgaudit/receiver"
	"github.com/go-stomp/stomp/v3/frame"
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
			c, err := New(Config{
				Addresses:             []string{addr},
				KeyHeader:             "x-idem-key",
				DeadLetterDestination: dlq,
				Subscriptions: []Subscription{{Destination: q, Handler: func(_ context.Context, m *receiver.Message) error {
					if m.Header("x-idem-key") == "producer-B:7" {
						mu.Lock()
						calls = append(calls, m.Duplicate)
						mu.Unlock()
					}
					done.Add(1)
					return nil
				}}},
				Pipeline: receiver.Config{MemoryOnly: true, Duplicates: tt.policy, OnDuplicate: func(_ context.Context, m *receiver.Message, reason string) {
					if tt.policy == receiver.DuplicateHook {
						hooked.Add(1)
					}
				}}})
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
			dl := drain(t, addr, dlq, 300*time.Millisecond)
			if len(dl) != tt.wantDLQ {
				t.Errorf("dead-letter destination holds %d, want %d", len(dl), tt.wantDLQ)
			}
			for _, h := range dl {
				if !strings.HasPrefix(h[copyhdr.DeadLetterReason], "duplicate:") || h["x-idem-key"] != "producer-B:7" {
					t.Errorf("dead letter %v", h)
				}
			}
			if m := c.Metrics().Snapshot(); m.Duplicates() != 1 {
				t.Errorf("duplicates counted %d, want 1 (%+v)", m.Duplicates(), m)
			}
			if left := drain(t, addr, q, 300*time.Millisecond); len(left) != 0 {
				t.Errorf("queue not empty: %v", left)
			}
			checkBrokerDLQ(t, addr, q)
		})
	}
}

// oversizedCase is one message a test sends over a frame limit, or under
// it.
type oversizedCase struct {
	key        string // x-idem-key, kept on a cut frame
	body       string
	fat        string // an extra header's value (x-fat), "" for none
	persistent bool
	reason     string // "" if it fits the limits, else what the reason names
}

// runOversized sends the cases to a fresh queue, in order, and consumes it
// with a consumer with the given limits and a dead-letter destination of
// its own. Every case that fits must be applied once; every one that does
// not must be in that dead-letter destination as a record (its key, origin
// and message id kept, an empty body marked as omitted, the reason),
// whether it was persistent or not. A persistent one must also be in the
// broker's dead-letter queue for the queue, in full (the consumer NACKed
// it, and its record says so); a non-persistent one must not (its record
// says it was not NACKed). Nothing may be left on the queue.
func runOversized(t *testing.T, maxHeader, maxBody int, cases []oversizedCase) {
	addr := stompAddr(t)
	q := "/queue/" + uniq("msgaudit.big")
	dlq := "/queue/" + uniq("msgaudit.big.dlq")
	tag := uniq("tag")
	t.Cleanup(func() {
		if t.Failed() {
			// A failure may stop the test before it drains what it sent,
			// up to 34 MiB held by a shared broker.
			for _, d := range []string{q, dlq, brokerDLQ(q)} {
				drain(t, addr, d, 300*time.Millisecond)
			}
		}
	})
	p := rawDial(t, addr)
	for _, tc := range cases {
		opts := []func(*frame.Frame) error{stompHeader(testTag, tag), stompHeader("x-idem-key", tc.key)}
		if tc.persistent {
			opts = append(opts, stompHeader("persistent", "true"))
		}
		if tc.fat != "" {
			opts = append(opts, stompHeader("x-fat", tc.fat))
		}
		if err := p.Send(q, "text/plain", []byte(tc.body), opts...); err != nil {
			t.Fatalf("send %s: %v", tc.key, err)
		}
	}
	if err := p.Disconnect(); err != nil { // its receipt: the broker has every message
		t.Fatal(err)
	}
	var small, big int
	for _, tc := range cases {
		if tc.reason == "" {
			small++
		} else {
			big++
		}
	}
	l := newLedger()
	c, err := New(Config{
		Addresses:             []string{addr},
		MaxBodyBytes:          maxBody,
		MaxHeaderBytes:        maxHeader,
		KeyHeader:             "x-idem-key",
		DeadLetterDestination: dlq,
		Subscriptions:         []Subscription{{Destination: q, Handler: l.handler(0, 0)}},
		Pipeline:              receiver.Config{MemoryOnly: true}})
	if err != nil {
		t.Fatal(err)
	}
	stop := runConsumer(t, c)
	// The graceful stop settles what is in flight, the oversized ones'
	// dead letters included.
	if !eventually(60*time.Second, func() bool { return l.count() >= small && c.Stats().Oversized >= uint64(big) }) {
		t.Fatalf("timed out after 60s waiting for %d messages applied and %d oversized ones cut: applied %d, stats %+v", small, big, l.count(), c.Stats())
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if s := c.Stats(); s.Oversized != uint64(big) || s.DeadLetters != uint64(big) {
		t.Errorf("oversized %d, dead letters sent %d; want %d each", s.Oversized, s.DeadLetters, big)
	}
	dl := drainAtLeast(t, addr, dlq, big, time.Second)
	records := map[string]map[string]string{}
	for _, h := range dl {
		if records[h["x-idem-key"]] != nil {
			t.Errorf("two dead letters of %s", h["x-idem-key"])
		}
		records[h["x-idem-key"]] = h
	}
	for _, tc := range cases {
		h := records[tc.key]
		if tc.reason == "" {
			if l.applied[tc.body] != 1 {
				t.Errorf("%s applied %d times, want once", tc.key, l.applied[tc.body])
			}
			if h != nil {
				t.Errorf("%s fits the limits but was dead-lettered: %v", tc.key, short(h))
			}
			continue
		}
		if h == nil {
			t.Errorf("%s (persistent %v, %s over the limit) is not in the dead-letter destination: lost", tc.key, tc.persistent, tc.reason)
			continue
		}
		if l.applied[tc.body] != 0 {
			t.Errorf("%s was handed to the handler", tc.key)
		}
		if h["body"] != "" || h[HeaderBodyOmitted] != "true" {
			t.Errorf("%s: record carries %d body bytes and %s=%q; want none and \"true\"", tc.key, len(h["body"]), HeaderBodyOmitted, h[HeaderBodyOmitted])
		}
		if want := map[bool]string{true: "true"}[tc.persistent]; h[HeaderOriginalNacked] != want {
			t.Errorf("%s (persistent %v): record has %s=%q, want %q", tc.key, tc.persistent, HeaderOriginalNacked, h[HeaderOriginalNacked], want)
		}
		if h[HeaderOriginalMessageID] == "" {
			t.Errorf("%s: record has no %s", tc.key, HeaderOriginalMessageID)
		}
		if r := h[copyhdr.DeadLetterReason]; !strings.HasPrefix(r, "oversized:") || !strings.Contains(r, tc.reason) {
			t.Errorf("%s: reason %q, want an oversized %s", tc.key, r, tc.reason)
		}
		if h[HeaderOriginalDestination] != q || h[copyhdr.OriginalKey] != tc.key || h["persistent"] != "true" {
			t.Errorf("%s: record headers %v; want origin %s, its key and persistent", tc.key, short(h), q)
		}
		if _, ok := h["x-fat"]; ok {
			t.Errorf("%s: record kept the oversized header", tc.key)
		}
	}
	if len(dl) != big {
		t.Errorf("dead-letter destination holds %d records, want %d", len(dl), big)
	}
	if l.count() != small {
		t.Errorf("applied %v, want %d messages", l.applied, small)
	}
	if left := drain(t, addr, q, 300*time.Millisecond); len(left) != 0 {
		t.Errorf("queue not empty: %d", len(left))
	}
	// The broker keeps the persistent ones, body and all, in its
	// dead-letter queue for q; the non-persistent ones it would have
	// discarded on a NACK, so they must not have been NACKed.
	full := map[string]map[string]string{}
	var persistentBig int
	for _, tc := range cases {
		if tc.reason != "" && tc.persistent {
			persistentBig++
		}
	}
	bdl := drainAtLeast(t, addr, brokerDLQ(q), persistentBig, time.Second)
	for _, h := range bdl {
		if full[h["x-idem-key"]] != nil {
			t.Errorf("two copies of %s in %s", h["x-idem-key"], brokerDLQ(q))
		}
		full[h["x-idem-key"]] = h
	}
	var nacked int
	for _, tc := range cases {
		h := full[tc.key]
		if tc.reason == "" || !tc.persistent {
			if h != nil {
				t.Errorf("%s (persistent %v, oversized %v) is in %s: %v", tc.key, tc.persistent, tc.reason != "", brokerDLQ(q), short(h))
			}
			continue
		}
		nacked++
		if h == nil {
			t.Errorf("%s (persistent, %s over the limit) is not in %s: its body is lost", tc.key, tc.reason, brokerDLQ(q))
			continue
		}
		if len(h["body"]) != len(tc.body) || h["body"] != tc.body {
			t.Errorf("%s in %s has a body of %d bytes, want its full %d", tc.key, brokerDLQ(q), len(h["body"]), len(tc.body))
		}
		if r := records[tc.key]; r != nil && r[HeaderOriginalMessageID] != h[frame.MessageId] {
			t.Errorf("%s: record points at message %q, the broker's dead letter is %q", tc.key, r[HeaderOriginalMessageID], h[frame.MessageId])
		}
	}
	if len(bdl) != nacked {
		t.Errorf("%s holds %d messages, want %d", brokerDLQ(q), len(bdl), nacked)
	}
}

// TestOversizedFrames: frames over MaxBodyBytes or MaxHeaderBytes are cut
// by the limiter and dead-lettered as records, persistent or not; a
// persistent one is NACKed in the record's transaction, so the broker
// keeps it in full in its dead-letter queue, while a non-persistent one
// (which ActiveMQ would discard on a NACK) is ACKed. The consumer keeps
// going and the other messages are applied.
func TestOversizedFrames(t *testing.T) {
	big := strings.Repeat("b", 20<<10)
	fat := strings.Repeat("h", 4<<10)
	runOversized(t, 2<<10, 8<<10, []oversizedCase{
		{key: "small:1", body: "small-1", persistent: true},
		{key: "bigp:1", body: big, persistent: true, reason: "body of 20480 bytes"},
		{key: "small:2", body: "small-2"},
		{key: "bignp:1", body: big + "n", reason: "body of 20481 bytes"},
		{key: "hdrp:1", body: "hdr-p", fat: fat, persistent: true, reason: "header block"},
		{key: "hdrnp:1", body: "hdr-np", fat: fat, reason: "header block"},
		{key: "small:3", body: "small-3", persistent: true},
	})
}

// TestOversizedDefaultLimits: with the default limits, a 17 MiB message
// sent without persistent:true (STOMP's default) and a persistent one both
// end up in the consumer's dead-letter destination as records, and the
// persistent one in full in the broker's dead-letter queue.
func TestOversizedDefaultLimits(t *testing.T) {
	if testing.Short() {
		t.Skip("sends 34 MiB through ActiveMQ; skipped with -short")
	}
	big := strings.Repeat("x", 17<<20)
	runOversized(t, 0, 0, []oversizedCase{
		{key: "bignp:1", body: big, reason: "body of 17825792 bytes over MaxBodyBytes (16777216 bytes)"},
		{key: "small:1", body: "small-1"},
		{key: "bigp:1", body: big + "p", persistent: true, reason: "body of 17825793 bytes"},
	})
}
