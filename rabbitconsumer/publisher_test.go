package rabbitconsumer

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/acemq/msgaudit/internal/copyhdr"
	"github.com/acemq/msgaudit/internal/outboxid"
	"github.com/acemq/msgaudit/outbox"
	"github.com/acemq/msgaudit/receiver"
)

func newTestPublisher(t *testing.T, cfg Config) *Publisher {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	p, err := NewPublisher(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	return p
}

func publishOK(t *testing.T, p *Publisher, id string, m outbox.Message) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := p.Publish(ctx, id, m); err != nil {
		t.Fatalf("Publish %s: %v", id, err)
	}
}

// TestPublishDelivered: a published message is on its queue, persistent,
// with the id as its message_id and its headers; concurrent Publish calls
// all succeed.
func TestPublishDelivered(t *testing.T) {
	t.Parallel()
	b := newBroker(t)
	q := b.queue("msgaudit-pub-")
	p := newTestPublisher(t, Config{URL: b.url})
	id := outboxid.Random()
	publishOK(t, p, id, outbox.Message{Destination: q, Body: []byte("hello"), Headers: map[string]string{"tenant": "a"}})
	d, ok := b.get(q)
	if !ok {
		t.Fatal("no message on the queue")
	}
	if d.MessageId != id || string(d.Body) != "hello" || d.Headers["tenant"] != "a" || d.DeliveryMode != 2 {
		t.Errorf("got message_id %q body %q headers %v delivery mode %d; want %q, hello, tenant=a, 2", d.MessageId, d.Body, d.Headers, d.DeliveryMode, id)
	}
	const n = 20
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for range n {
		wg.Go(func() {
			errs <- p.Publish(context.Background(), outboxid.Random(), outbox.Message{Destination: q, Body: []byte("c")})
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
	if got := b.ready(q); got != n {
		t.Errorf("%d messages on the queue, want %d", got, n)
	}
}

// TestPublishSameIDOnce: the same id published twice runs the handler of
// a Consumer in its default configuration once: it is keyed by the
// message_id.
func TestPublishSameIDOnce(t *testing.T) {
	t.Parallel()
	b := newBroker(t)
	q := b.queue("msgaudit-pubdup-")
	p := newTestPublisher(t, Config{URL: b.url})
	id := outboxid.Random()
	for _, body := range []string{"first", "resend"} {
		publishOK(t, p, id, outbox.Message{Destination: q, Body: []byte(body)})
	}
	var mu sync.Mutex
	var keys []string
	c, err := New(Config{URL: b.url, Queue: q, Handler: func(_ context.Context, m *receiver.Message) error {
		mu.Lock()
		defer mu.Unlock()
		keys = append(keys, m.IdempotencyKey())
		return nil
	}, Pipeline: receiver.Config{MemoryOnly: true}})
	if err != nil {
		t.Fatal(err)
	}
	stop := runConsumer(t, c)
	waitFor(t, "both deliveries settled", func() bool {
		s := c.Metrics().Snapshot()
		return s.Processed+s.Duplicates() == 2
	})
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(keys) != 1 || keys[0] != id {
		t.Errorf("handler ran with keys %v; want once with %q", keys, id)
	}
}

// TestPublishRefused: a routing key no queue takes, a body over
// MaxBodyBytes and reserved or hostile headers wrap outbox.ErrRefused, and
// the Publisher goes on publishing after them.
func TestPublishRefused(t *testing.T) {
	t.Parallel()
	b := newBroker(t)
	q := b.queue("msgaudit-pubrefused-")
	p := newTestPublisher(t, Config{URL: b.url, MaxBodyBytes: 1024})
	for _, tt := range []struct {
		name string
		id   string
		m    outbox.Message
	}{
		{"no such queue", "", outbox.Message{Destination: randomName(t, "msgaudit-none-")}},
		{"empty routing key", "", outbox.Message{}},
		{"routing key over 255 bytes", "", outbox.Message{Destination: strings.Repeat("q", 256)}},
		{"body over MaxBodyBytes", "", outbox.Message{Destination: q, Body: make([]byte, 1025)}},
		{"invalid id", "a b", outbox.Message{Destination: q}},
		{"CC", "", outbox.Message{Destination: q, Headers: map[string]string{"CC": q}}},
		{"BCC", "", outbox.Message{Destination: q, Headers: map[string]string{"bcc": q}}},
		{"x-death", "", outbox.Message{Destination: q, Headers: map[string]string{"x-death": "1"}}},
		{"x-first-death-queue", "", outbox.Message{Destination: q, Headers: map[string]string{"x-first-death-queue": q}}},
		{"delivery count", "", outbox.Message{Destination: q, Headers: map[string]string{HeaderDeliveryCount: "9"}}},
		{"copy key", "", outbox.Message{Destination: q, Headers: map[string]string{copyhdr.OriginalKey: "k"}}},
		{"outbox id header", "", outbox.Message{Destination: q, Headers: map[string]string{outboxid.Header: "d-x"}}},
		{"empty name", "", outbox.Message{Destination: q, Headers: map[string]string{"": "v"}}},
		{"LF in name", "", outbox.Message{Destination: q, Headers: map[string]string{"a\nb": "v"}}},
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
	publishOK(t, p, outboxid.Random(), outbox.Message{Destination: q, Body: []byte("after")})
	if got := b.ready(q); got != 1 {
		t.Errorf("%d messages on %s, want the one published after the refusals", got, q)
	}
}

// TestPublishConnectionLoss: a Publish on a cut connection fails with a
// transient error, and a later one redials and succeeds.
func TestPublishConnectionLoss(t *testing.T) {
	t.Parallel()
	b := newBroker(t)
	q := b.queue("msgaudit-publoss-")
	px := newProxy(t, b.hostPort(), nil)
	p := newTestPublisher(t, Config{URL: b.via("amqp", px.Addr()), ReconnectBackoff: receiver.Backoff{Initial: 10 * time.Millisecond, Max: 10 * time.Millisecond}})
	publishOK(t, p, outboxid.Random(), outbox.Message{Destination: q, Body: []byte("before")})
	px.SetDown(true)
	px.Cut()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// The client may not have seen the cut yet; its first Publish then
	// fails writing or waiting.
	err := p.Publish(ctx, outboxid.Random(), outbox.Message{Destination: q, Body: []byte("lost")})
	if err == nil || errors.Is(err, outbox.ErrRefused) {
		t.Fatalf("Publish on a cut connection: %v; want a transient error", err)
	}
	px.SetDown(false)
	waitFor(t, "a Publish after the cut", func() bool {
		return p.Publish(ctx, outboxid.Random(), outbox.Message{Destination: q, Body: []byte("after")}) == nil
	})
	if got := b.ready(q); got != 2 {
		t.Errorf("%d messages on %s, want 2 (before and after the cut)", got, q)
	}
}

// TestPublisherSecrets: a Publisher prints no credentials with any verb,
// and its errors carry none.
func TestPublisherSecrets(t *testing.T) {
	t.Parallel()
	b := newBroker(t)
	const pass = "p@ss:w/rd%?#&= x"
	u, err := url.Parse(b.url)
	if err != nil {
		t.Fatal(err)
	}
	user := u.User.Username()
	good, _ := u.User.Password()
	// The broker's own password, for fmt; a wrong one, for the errors.
	p := newTestPublisher(t, Config{URL: b.url})
	for _, verb := range []string{"%v", "%+v", "%#v", "%s"} {
		if s := fmt.Sprintf(verb, p); strings.Contains(s, good) || strings.Contains(s, "amqp") {
			t.Errorf("%s of the Publisher: %s", verb, s)
		}
	}
	u.User = url.UserPassword(user, pass)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err = NewPublisher(ctx, Config{URL: u.String()})
	if err == nil {
		t.Fatal("NewPublisher with a wrong password: no error")
	}
	if s := fmt.Sprintf("%v %+v %#v", err, err, err); strings.Contains(s, "w/rd") || strings.Contains(s, url.QueryEscape("w/rd")) || strings.Contains(s, "w%2Frd") {
		t.Errorf("error shows the password: %s", s)
	}
}
