package stompconsumer

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/acemq/msgaudit/internal/copyhdr"
	"github.com/acemq/msgaudit/internal/outboxid"
	"github.com/acemq/msgaudit/outbox"
	"github.com/acemq/msgaudit/receiver"
	"github.com/go-stomp/stomp/v3/frame"
)

// newTestPublisher connects a Publisher to addr with the test broker's
// credentials, closed with the test.
func newTestPublisher(t *testing.T, cfg Config) *Publisher {
	t.Helper()
	if user, pass, ok := strings.Cut(os.Getenv("MSGAUDIT_STOMP_AUTH"), ":"); ok && cfg.Login == "" {
		cfg.Login, cfg.Passcode = user, pass
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	p, err := NewPublisher(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	return p
}

func publish(t *testing.T, p *Publisher, id string, m outbox.Message) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := p.Publish(ctx, id, m); err != nil {
		t.Fatalf("Publish %s: %v", id, err)
	}
}

// TestPublishDelivered: a published message is on its queue, persistent,
// with its id in outboxid.Header, its headers and its content type.
func TestPublishDelivered(t *testing.T) {
	addr := stompAddr(t)
	q := "/queue/" + uniq("msgaudit.pub")
	p := newTestPublisher(t, Config{Addresses: []string{addr}})
	id := outboxid.Random()
	publish(t, p, id, outbox.Message{Destination: q, Body: []byte("hello"),
		Headers: map[string]string{"content-type": "text/plain", "tenant": "a:b\\c", testTag: "pub"}})
	got := drainAtLeast(t, addr, q, 1, 300*time.Millisecond)
	if len(got) != 1 {
		t.Fatalf("%d messages on %s, want 1: %v", len(got), q, got)
	}
	for k, want := range map[string]string{outboxid.Header: id, "body": "hello", "tenant": "a:b\\c",
		"content-type": "text/plain", "persistent": "true"} {
		if got[0][k] != want {
			t.Errorf("header %s = %q, want %q (message %v)", k, got[0][k], want, got[0])
		}
	}
	checkBrokerDLQ(t, addr, q)
}

// TestPublishSameIDOnce: the same id published twice (a relay's resend)
// runs the handler of a Consumer in its default configuration once, keyed
// by outboxid.Key; with KeyHeader set, or with an id outboxid.Valid
// refuses, the outbox header is not the key and both run.
func TestPublishSameIDOnce(t *testing.T) {
	addr := stompAddr(t)
	for _, tt := range []struct {
		name      string
		keyHeader string
		id        string // sent raw when not a valid id
		wantRuns  int
	}{
		{"default", "", outboxid.Random(), 1},
		{"invalid id ignored", "", "not valid:" + outboxid.Random(), 2},
		{"too long id ignored", "", strings.Repeat("x", outboxid.MaxLen+1), 2},
		{"KeyHeader set", "x-key", outboxid.Random(), 2},
	} {
		t.Run(tt.name, func(t *testing.T) {
			q := "/queue/" + uniq("msgaudit.pubdup")
			if outboxid.Valid(tt.id) {
				p := newTestPublisher(t, Config{Addresses: []string{addr}})
				for _, body := range []string{"first", "resend"} {
					publish(t, p, tt.id, outbox.Message{Destination: q, Body: []byte(body),
						Headers: map[string]string{"x-key": uniq("producer") + ":1"}})
				}
			} else {
				produce(t, addr, q, uniq("tag"), 2, func(int) map[string]string {
					return map[string]string{outboxid.Header: tt.id, "x-key": uniq("producer") + ":1"}
				})
			}
			got := newSeen()
			c, err := New(Config{
				Addresses:             []string{addr},
				KeyHeader:             tt.keyHeader,
				DeadLetterDestination: noDeadLetters(t, addr),
				Subscriptions: []Subscription{{Destination: q, Handler: func(_ context.Context, m *receiver.Message) error {
					got.add(m)
					return nil
				}}},
				Pipeline: receiver.Config{MemoryOnly: true}})
			if err != nil {
				t.Fatal(err)
			}
			stop := runConsumer(t, c)
			waitFor(t, 30*time.Second, "both deliveries settled", func() bool {
				s := c.Metrics().Snapshot()
				return s.Processed+s.Duplicates() == 2
			})
			if err := stop(); err != nil {
				t.Fatal(err)
			}
			var runs []*receiver.Message
			for _, b := range []string{"first", "resend", "0", "1"} {
				runs = append(runs, got.get(b)...)
			}
			if len(runs) != tt.wantRuns {
				t.Fatalf("handler ran %d times, want %d", len(runs), tt.wantRuns)
			}
			for _, m := range runs {
				k := m.IdempotencyKey()
				switch {
				case tt.wantRuns == 1 && k != outboxid.Key(tt.id):
					t.Errorf("keyed %q, want %q", k, outboxid.Key(tt.id))
				case tt.keyHeader != "" && k != m.Header(tt.keyHeader):
					t.Errorf("keyed %q, want the KeyHeader's %q", k, m.Header(tt.keyHeader))
				case tt.keyHeader == "" && tt.wantRuns == 2 && k != m.Header(frame.MessageId):
					t.Errorf("keyed %q, want the message-id %q", k, m.Header(frame.MessageId))
				}
			}
			if left := drain(t, addr, q, 300*time.Millisecond); len(left) != 0 {
				t.Errorf("queue not empty: %v", left)
			}
			checkBrokerDLQ(t, addr, q)
		})
	}
}

// TestOutboxKeyDomain: the key derived from an outbox id never equals a
// broker's message-id ("ID:..."), and the consumer's key choice follows
// the documented order.
func TestOutboxKeyDomain(t *testing.T) {
	c, err := New(Config{Addresses: []string{"127.0.0.1:1"}, Subscriptions: []Subscription{{Destination: "/queue/x", Handler: nopHandler}},
		Pipeline: receiver.Config{MemoryOnly: true}})
	if err != nil {
		t.Fatal(err)
	}
	withHeader, err := New(Config{Addresses: []string{"127.0.0.1:1"}, KeyHeader: "x-key",
		Subscriptions: []Subscription{{Destination: "/queue/x", Handler: nopHandler}}, Pipeline: receiver.Config{MemoryOnly: true}})
	if err != nil {
		t.Fatal(err)
	}
	const msgID = "ID:host-1-2:1:1:1:1"
	for _, tt := range []struct {
		name string
		c    *Consumer
		h    map[string]string
		want string
	}{
		{"message-id", c, map[string]string{frame.MessageId: msgID}, msgID},
		{"outbox id", c, map[string]string{frame.MessageId: msgID, outboxid.Header: "d-abc"}, "outbox:d-abc"},
		{"outbox id spelling a message-id", c, map[string]string{frame.MessageId: msgID, outboxid.Header: "ID-host"}, "outbox:ID-host"},
		{"invalid outbox id", c, map[string]string{frame.MessageId: msgID, outboxid.Header: msgID}, msgID},
		{"empty outbox id", c, map[string]string{frame.MessageId: msgID, outboxid.Header: ""}, msgID},
		{"carried key first", c, map[string]string{frame.MessageId: msgID, outboxid.Header: "d-abc", copyhdr.OriginalKey: "outbox:d-old"}, "outbox:d-old"},
		{"KeyHeader set", withHeader, map[string]string{frame.MessageId: msgID, outboxid.Header: "d-abc", "x-key": "k"}, "k"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.c.key(tt.h); got != tt.want {
				t.Errorf("key = %q, want %q", got, tt.want)
			}
		})
	}
	for _, id := range []string{"d-1", "r-2", "ID", "x"} {
		if k := outboxid.Key(id); strings.HasPrefix(k, "ID:") {
			t.Errorf("outboxid.Key(%q) = %q spells an ActiveMQ message-id", id, k)
		}
	}
}

// TestOutboxRetryCopyKeepsKey: with CopySecret, a failed outbox message
// is retried as a signed copy that keeps the outbox key; the copy's
// handler sees the same key, attempt 2.
func TestOutboxRetryCopyKeepsKey(t *testing.T) {
	addr := stompAddr(t)
	q := "/queue/" + uniq("msgaudit.pubcopy")
	p := newTestPublisher(t, Config{Addresses: []string{addr}})
	id := outboxid.Random()
	publish(t, p, id, outbox.Message{Destination: q, Body: []byte("m")})
	got := newSeen()
	c, err := New(Config{
		Addresses:             []string{addr},
		CopySecret:            []byte(strings.Repeat("outbox-secret-", 3)),
		DeadLetterDestination: noDeadLetters(t, addr),
		Subscriptions: []Subscription{{Destination: q, Handler: func(_ context.Context, m *receiver.Message) error {
			got.add(m)
			if len(got.get("m")) == 1 {
				return errors.New("first attempt fails")
			}
			return nil
		}}},
		Pipeline: receiver.Config{MemoryOnly: true, Backoff: receiver.Backoff{Initial: time.Millisecond, Max: time.Millisecond}}})
	if err != nil {
		t.Fatal(err)
	}
	stop := runConsumer(t, c)
	waitFor(t, 30*time.Second, "the retry copy handled", func() bool { return c.Metrics().Snapshot().Processed == 1 })
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	runs := got.get("m")
	if len(runs) != 2 || c.Stats().RetriesSent != 1 {
		t.Fatalf("%d runs, %d retry copies; want 2 and 1", len(runs), c.Stats().RetriesSent)
	}
	for i, m := range runs {
		if k := m.IdempotencyKey(); k != outboxid.Key(id) || m.Attempt != i+1 {
			t.Errorf("run %d: key %q attempt %d; want %q attempt %d", i, k, m.Attempt, outboxid.Key(id), i+1)
		}
	}
	checkBrokerDLQ(t, addr, q)
}

// TestPublishRefused: what the broker or Publish refuses wraps
// outbox.ErrRefused, and the Publisher goes on publishing after it.
// ActiveMQ accepts a SEND to nearly any destination name (foo, /bogus/x,
// /queue/a b are all created); it answers with an ERROR frame a
// /remote-temp-queue/ that does not exist, and drops the connection,
// without an ERROR, on "/queue/" (which Publish refuses itself).
func TestPublishRefused(t *testing.T) {
	addr := stompAddr(t)
	q := "/queue/" + uniq("msgaudit.pubrefused")
	p := newTestPublisher(t, Config{Addresses: []string{addr}, MaxBodyBytes: 1024})
	for _, tt := range []struct {
		name string
		id   string
		m    outbox.Message
	}{
		{"no such temp queue", "", outbox.Message{Destination: "/remote-temp-queue/" + uniq("none")}},
		{"no queue name", "", outbox.Message{Destination: "/queue/"}},
		{"empty destination", "", outbox.Message{}},
		{"LF in destination", "", outbox.Message{Destination: q + "\nx"}},
		{"body over MaxBodyBytes", "", outbox.Message{Destination: q, Body: make([]byte, 1025)}},
		{"invalid id", "a:b", outbox.Message{Destination: q}},
		{"destination header", "", outbox.Message{Destination: q, Headers: map[string]string{"destination": "/queue/other"}}},
		{"receipt header", "", outbox.Message{Destination: q, Headers: map[string]string{"receipt": "1"}}},
		{"content-length header", "", outbox.Message{Destination: q, Headers: map[string]string{"Content-Length": "1"}}},
		{"transaction header", "", outbox.Message{Destination: q, Headers: map[string]string{"transaction": "tx"}}},
		{"message-id header", "", outbox.Message{Destination: q, Headers: map[string]string{"message-id": "ID:x"}}},
		{"persistent header", "", outbox.Message{Destination: q, Headers: map[string]string{"persistent": "false"}}},
		{"outbox id header", "", outbox.Message{Destination: q, Headers: map[string]string{outboxid.Header: "d-other"}}},
		{"copy key header", "", outbox.Message{Destination: q, Headers: map[string]string{copyhdr.OriginalKey: "k"}}},
		{"empty name", "", outbox.Message{Destination: q, Headers: map[string]string{"": "v"}}},
		{"LF in name", "", outbox.Message{Destination: q, Headers: map[string]string{"a\nb": "v"}}},
		{"CR in value", "", outbox.Message{Destination: q, Headers: map[string]string{"a": "v\r"}}},
		{"NUL in value", "", outbox.Message{Destination: q, Headers: map[string]string{"a": "v\x00"}}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			id := tt.id
			if id == "" {
				id = outboxid.Random()
			}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			if err := p.Publish(ctx, id, tt.m); !errors.Is(err, outbox.ErrRefused) {
				t.Errorf("Publish: %v; want outbox.ErrRefused", err)
			}
		})
	}
	publish(t, p, outboxid.Random(), outbox.Message{Destination: q, Body: []byte("after")})
	if got := drainAtLeast(t, addr, q, 1, 300*time.Millisecond); len(got) != 1 || got[0]["body"] != "after" {
		t.Errorf("on %s: %v; want the one message published after the refusals", q, got)
	}
}

// TestPublishConnectionLoss: a Publish on a cut connection fails with a
// transient error, and a later one redials and succeeds.
func TestPublishConnectionLoss(t *testing.T) {
	addr := stompAddr(t)
	q := "/queue/" + uniq("msgaudit.publoss")
	px := newProxy(t, addr)
	p := newTestPublisher(t, Config{Addresses: []string{px.Addr()}, ReconnectBackoff: receiver.Backoff{Initial: 10 * time.Millisecond, Max: 10 * time.Millisecond}})
	publish(t, p, outboxid.Random(), outbox.Message{Destination: q, Body: []byte("before")})
	px.SetDown(true)
	px.Cut()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err := p.Publish(ctx, outboxid.Random(), outbox.Message{Destination: q, Body: []byte("lost")})
	if err == nil || errors.Is(err, outbox.ErrRefused) {
		t.Fatalf("Publish on a cut connection: %v; want a transient error", err)
	}
	px.SetDown(false)
	id := outboxid.Random()
	waitFor(t, 30*time.Second, "a Publish after the cut", func() bool {
		return p.Publish(ctx, id, outbox.Message{Destination: q, Body: []byte("after")}) == nil
	})
	got := drainAtLeast(t, addr, q, 2, 300*time.Millisecond)
	var bodies []string
	for _, m := range got {
		bodies = append(bodies, m["body"])
	}
	if strings.Join(bodies, ",") != "before,after" {
		t.Errorf("on %s: %v; want before,after", q, bodies)
	}
}

// TestPublisherSecrets: a Publisher prints no credentials with any verb,
// and its errors carry none.
func TestPublisherSecrets(t *testing.T) {
	addr := stompAddr(t) // no authentication: any login is accepted
	const pass = "p@ss:w/rd%?#&= x"
	p := newTestPublisher(t, Config{Addresses: []string{addr}, Login: "user", Passcode: pass})
	for _, verb := range []string{"%v", "%+v", "%#v", "%s"} {
		if s := fmt.Sprintf(verb, p); strings.Contains(s, "w/rd") {
			t.Errorf("%s of the Publisher: %s", verb, s)
		}
	}
	authAddr := envOrSkip(t, "MSGAUDIT_STOMP_AUTH_ADDR", "ActiveMQ with authentication")
	for _, cfg := range []Config{
		{Addresses: []string{authAddr}, Login: "msgaudit", Passcode: pass},
		{Addresses: []string{"tcp://msgaudit:p%40ss%3Aw%2Frd@" + authAddr}},
		{Addresses: []string{"tcp://msgaudit:p@ss:w/rd@" + authAddr}},
	} {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		_, err := NewPublisher(ctx, cfg)
		cancel()
		if err == nil {
			t.Errorf("NewPublisher with a wrong passcode: no error")
		} else if s := fmt.Sprintf("%v %+v %#v", err, err, err); strings.Contains(s, "w/rd") || strings.Contains(s, "w%2Frd") {
			t.Errorf("error shows the passcode: %s", s)
		}
	}
}

// TestPublishNoReceipt: a broker that takes the SEND but never confirms
// it holds Publish until ctx ends, no longer; the error is transient, and
// the next Publish dials a new connection.
func TestPublishNoReceipt(t *testing.T) {
	t.Parallel()
	addr, conns := fakeBroker(t, "CONNECTED\nversion:1.2\nheart-beat:0,0\n\n\x00", func(c net.Conn, r *bufio.Reader) {
		for {
			if _, err := r.ReadBytes(0); err != nil {
				return
			}
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	p, err := NewPublisher(ctx, Config{Addresses: []string{addr}, Heartbeat: -1, ReconnectBackoff: receiver.Backoff{Initial: time.Millisecond, Max: time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	for i := range 2 {
		short, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		err := p.Publish(short, outboxid.Random(), outbox.Message{Destination: "/queue/x"})
		cancel()
		if !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, outbox.ErrRefused) {
			t.Errorf("Publish %d with no receipt: %v; want the deadline, transient", i, err)
		}
	}
	if n := conns.Load(); n != 2 {
		t.Errorf("%d connections, want 2 (the second Publish redials)", n)
	}
}
