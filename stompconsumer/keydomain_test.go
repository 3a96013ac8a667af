package stompconsumer

import (
	"context"
	"testing"
	"time"

	"github.com/acemq/msgaudit/receiver"
	"github.com/go-stomp/stomp/v3/frame"
)

// TestProducerMessageIDIgnored: the default key is the broker's
// message-id, which a STOMP producer cannot choose. ActiveMQ replaces a
// message-id header on SEND with its own, so two messages sent with the
// same forged message-id (a valid audit id) are two messages to the
// consumer, each keyed by the id the broker gave it: a producer cannot
// make its message the duplicate of another, nor claim another's key.
func TestProducerMessageIDIgnored(t *testing.T) {
	addr := stompAddr(t)
	q := "/queue/" + uniq("msgaudit.forgedid")
	const forged = "ID:forged-host-1-1:1:-1:1:1"
	c := rawDial(t, addr)
	for _, body := range []string{"a", "b"} {
		if err := c.Send(q, "text/plain", []byte(body), stompHeader(frame.MessageId, forged), stompHeader("persistent", "true")); err != nil {
			t.Fatal(err)
		}
	}
	_ = c.Disconnect()
	got := newSeen()
	cons, err := New(Config{
		Addresses:             []string{addr},
		DeadLetterDestination: noDeadLetters(t, addr),
		Subscriptions: []Subscription{{Destination: q, Handler: func(_ context.Context, m *receiver.Message) error {
			got.add(m)
			return nil
		}}},
		Pipeline: receiver.Config{MemoryOnly: true}})
	if err != nil {
		t.Fatal(err)
	}
	stop := runConsumer(t, cons)
	waitFor(t, 30*time.Second, "both messages handled", func() bool { return len(got.get("a")) == 1 && len(got.get("b")) == 1 })
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	a, b := got.get("a")[0], got.get("b")[0]
	for _, m := range []*receiver.Message{a, b} {
		if k := m.IdempotencyKey(); k == forged || k != m.Header(frame.MessageId) {
			t.Errorf("message %s keyed %q, message-id %q; want the broker's own id, not %q", m.Body, k, m.Header(frame.MessageId), forged)
		}
	}
	if a.IdempotencyKey() == b.IdempotencyKey() {
		t.Errorf("both messages keyed %q", a.IdempotencyKey())
	}
	if s := cons.Metrics().Snapshot(); s.Duplicates() != 0 || s.Processed != 2 {
		t.Errorf("processed %d, duplicates %d; want 2 and 0", s.Processed, s.Duplicates())
	}
	if left := drain(t, addr, q, 300*time.Millisecond); len(left) != 0 {
		t.Errorf("queue not empty: %v", left)
	}
	checkBrokerDLQ(t, addr, q)
}
