package natsconsumer

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/acemq/msgaudit/internal/outboxid"
	"github.com/acemq/msgaudit/internal/testkit/testwait"
	"github.com/acemq/msgaudit/outbox"
	"github.com/acemq/msgaudit/receiver"
	"github.com/nats-io/nats.go/jetstream"
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

// lastMsg is the stream's last message on subject.
func (e *natsEnv) lastMsg(subject string) *jetstream.RawStreamMsg {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := e.js.Stream(ctx, e.stream)
	if err != nil {
		e.t.Fatal(err)
	}
	m, err := s.GetLastMsgForSubject(ctx, subject)
	if err != nil {
		e.t.Fatalf("last message on %s: %v", subject, err)
	}
	return m
}

// streamMsgs is the number of messages in the test's stream.
func (e *natsEnv) streamMsgs() uint64 {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := e.js.Stream(ctx, e.stream)
	if err != nil {
		e.t.Fatal(err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		e.t.Fatal(err)
	}
	return info.State.Msgs
}

// TestPublishDelivered: a published message is in the stream with the id
// as its Nats-Msg-Id and its headers.
func TestPublishDelivered(t *testing.T) {
	e := newEnv(t, 0)
	p := newTestPublisher(t, Config{URL: e.url})
	id := outboxid.Random()
	publishOK(t, p, id, outbox.Message{Destination: e.subject, Body: []byte("hello"), Headers: map[string]string{"Tenant": "a"}})
	m := e.lastMsg(e.subject)
	if m.Header.Get(jetstream.MsgIDHeader) != id || string(m.Data) != "hello" || m.Header.Get("Tenant") != "a" {
		t.Errorf("got Nats-Msg-Id %q body %q headers %v; want %q, hello, Tenant=a", m.Header.Get(jetstream.MsgIDHeader), m.Data, m.Header, id)
	}
}

// TestPublishSameIDOnce: the same id published twice is success both
// times (the second absorbed by the stream's duplicate window) and runs
// the handler of a Consumer in its default configuration once, keyed
// "id:<id>".
func TestPublishSameIDOnce(t *testing.T) {
	e := newEnv(t, 0)
	p := newTestPublisher(t, Config{URL: e.url})
	id := outboxid.Random()
	for _, body := range []string{"first", "resend"} {
		publishOK(t, p, id, outbox.Message{Destination: e.subject, Body: []byte(body)})
	}
	if n := e.streamMsgs(); n != 1 {
		t.Errorf("%d messages in the stream, want 1", n)
	}
	var calls counter
	cfg := e.config(e.url, func(_ context.Context, m *receiver.Message) error {
		calls.add(m.Key)
		return nil
	})
	cfg.Pipeline.MemoryOnly = true
	c := newConsumer(t, cfg)
	stop := start(t, c)
	testwait.Until(t, time.Minute, "the message handled", func() bool { return calls.get("id:"+id) == 1 && e.drained() })
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if k := calls.get("id:" + id); k != 1 {
		t.Errorf("handler ran %d times, want 1", k)
	}
}

// TestPublishRefused: a subject no stream captures, a message over the
// stream's maximum size or the server's max_payload and reserved or
// hostile headers wrap outbox.ErrRefused, and the Publisher goes on
// publishing after them.
func TestPublishRefused(t *testing.T) {
	e := newEnv(t, 0)
	small := "msgaudit-test-small-" + randomName(t)
	ctx := testwait.Context(t, testwait.Long)
	if _, err := e.js.CreateStream(ctx, jetstream.StreamConfig{Name: strings.ReplaceAll(small, "-", "_"), Subjects: []string{small},
		Storage: jetstream.FileStorage, MaxMsgSize: 1024}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.deleteStream(strings.ReplaceAll(small, "-", "_")) })
	p := newTestPublisher(t, Config{URL: e.url})
	for _, tt := range []struct {
		name string
		id   string
		m    outbox.Message
	}{
		{"no stream", "", outbox.Message{Destination: "msgaudit-none-" + randomName(t) + ".x"}},
		{"over the stream's MaxMsgSize", "", outbox.Message{Destination: small, Body: make([]byte, 2048)}},
		{"over max_payload", "", outbox.Message{Destination: e.subject, Body: make([]byte, e.nc.MaxPayload()+1)}},
		{"wildcard subject", "", outbox.Message{Destination: "a.*"}},
		{"empty subject", "", outbox.Message{}},
		{"invalid id", "a:b", outbox.Message{Destination: e.subject}},
		{"Nats-Msg-Id", "", outbox.Message{Destination: e.subject, Headers: map[string]string{"Nats-Msg-Id": "other"}}},
		{"Nats-Expected-Last-Sequence", "", outbox.Message{Destination: e.subject, Headers: map[string]string{"nats-expected-last-sequence": "1"}}},
		{"Nats-Rollup", "", outbox.Message{Destination: e.subject, Headers: map[string]string{"Nats-Rollup": "all"}}},
		{"Nats-TTL", "", outbox.Message{Destination: e.subject, Headers: map[string]string{"Nats-TTL": "1s"}}},
		{"outbox id header", "", outbox.Message{Destination: e.subject, Headers: map[string]string{outboxid.Header: "d-x"}}},
		{"colon in name", "", outbox.Message{Destination: e.subject, Headers: map[string]string{"a:b": "v"}}},
		{"LF in name", "", outbox.Message{Destination: e.subject, Headers: map[string]string{"a\nb": "v"}}},
		{"CR in value", "", outbox.Message{Destination: e.subject, Headers: map[string]string{"a": "v\r\nNats-Rollup: all"}}},
		{"empty name", "", outbox.Message{Destination: e.subject, Headers: map[string]string{"": "v"}}},
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
	publishOK(t, p, outboxid.Random(), outbox.Message{Destination: e.subject, Body: []byte("after")})
	if n := e.streamMsgs(); n != 1 {
		t.Errorf("%d messages in the stream, want the one published after the refusals", n)
	}
}

// TestPublishConnectionLoss: a Publish while the connection is cut fails
// with a transient error, and a later one succeeds once it is back.
func TestPublishConnectionLoss(t *testing.T) {
	e := newEnv(t, 0)
	px := e.newProxy()
	p := newTestPublisher(t, Config{URL: "nats://" + px.Addr(), ReconnectBackoff: receiver.Backoff{Initial: 10 * time.Millisecond, Max: 10 * time.Millisecond}})
	publishOK(t, p, outboxid.Random(), outbox.Message{Destination: e.subject, Body: []byte("before")})
	px.SetDown(true)
	px.Cut()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	err := p.Publish(ctx, outboxid.Random(), outbox.Message{Destination: e.subject, Body: []byte("lost")})
	cancel()
	if err == nil || errors.Is(err, outbox.ErrRefused) {
		t.Fatalf("Publish on a cut connection: %v; want a transient error", err)
	}
	px.SetDown(false)
	testwait.Until(t, time.Minute, "a Publish after the cut", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		return p.Publish(ctx, outboxid.Random(), outbox.Message{Destination: e.subject, Body: []byte("after")}) == nil
	})
	if got := string(e.lastMsg(e.subject).Data); got != "after" {
		t.Errorf("last message %q, want after", got)
	}
}

// TestPublisherSecrets: a Publisher prints no credentials with any verb,
// and its errors carry none.
func TestPublisherSecrets(t *testing.T) {
	e := newEnv(t, 0)
	// The test server asks for no credentials and ignores these.
	const enc = "p%40ss%3Aw%2Frd%25%3F%23"
	u := "nats://user:" + enc + "@" + e.hostPort
	p := newTestPublisher(t, Config{URL: u})
	for _, verb := range []string{"%v", "%+v", "%#v", "%s", "%q", "%x"} {
		if s := fmt.Sprintf(verb, p); strings.Contains(s, "w%2Frd") || strings.Contains(s, "w/rd") || strings.Contains(s, "user") {
			t.Errorf("%s of the Publisher: %s", verb, s)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := NewPublisher(ctx, Config{URL: "nats://user:" + enc + "@127.0.0.1:1", ConnectTimeout: time.Second})
	if err == nil {
		t.Fatal("NewPublisher to a closed port: no error")
	}
	if s := fmt.Sprintf("%v %+v %#v", err, err, err); strings.Contains(s, "w%2Frd") || strings.Contains(s, "w/rd") {
		t.Errorf("error shows the password: %s", s)
	}
}
