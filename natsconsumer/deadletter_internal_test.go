package natsconsumer

import (
	"context"
	"testing"
	"time"

	"github.com/acemq/msgaudit/internal/testkit/testwait"
	"github.com/acemq/msgaudit/receiver"
	"github.com/nats-io/nats.go/jetstream"
)

// lostTerm is a delivery whose Term never reaches the server: its reply
// subject has no responder.
type lostTerm struct{ jetstream.Msg }

func (lostTerm) Reply() string { return "msgaudit-test-no-responder.term" }

// TestDeadLetterRecordOnce: a message dead-lettered twice, because the
// Term of the first time was lost, leaves one record in the dead-letter
// stream, under the Nats-Msg-Id derived from the stream, the consumer and
// the sequence.
func TestDeadLetterRecordOnce(t *testing.T) {
	e := newEnv(t, 0)
	cfg := e.config(e.url, func(context.Context, *receiver.Message) error { return nil })
	cfg.Pipeline.MemoryOnly = true
	c := newConsumer(t, cfg)
	ctx := testwait.Context(t, testwait.Long)
	raw, err := e.js.CreateOrUpdateConsumer(ctx, e.stream, jetstream.ConsumerConfig{Durable: e.consumer,
		AckPolicy: jetstream.AckExplicitPolicy, AckWait: time.Minute, MaxDeliver: -1})
	if err != nil {
		t.Fatal(err)
	}
	ack := e.publish("poison", "")
	b, err := raw.Fetch(1, jetstream.FetchMaxWait(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	var msg jetstream.Msg
	for m := range b.Messages() {
		msg = m
	}
	if msg == nil {
		t.Fatal("no delivery")
	}
	meta, err := msg.Metadata()
	if err != nil {
		t.Fatal(err)
	}
	res := receiver.Result{Action: receiver.DeadLetter, Reason: "test", Attempt: 1}
	c.deadLetter(ctx, e.nc, e.js, lostTerm{msg}, meta, c.message(msg, meta), res)
	if s := c.Stats(); s.DeadLetters != 1 || s.AckErrors != 1 {
		t.Fatalf("stats %+v after the first time; want the record stored and the Term failed", s)
	}
	c.deadLetter(ctx, e.nc, e.js, msg, meta, c.message(msg, meta), res)
	testwait.Until(t, 10*time.Second, "the message terminated", e.drained)
	dl := e.deadLetters()
	if len(dl) != 1 {
		t.Fatalf("%d records in the dead-letter stream; want 1", len(dl))
	}
	if got, want := dl[0].Header.Get(jetstream.MsgIDHeader), deadLetterID(e.stream, e.consumer, ack.Sequence); got != want {
		t.Errorf("record Nats-Msg-Id %q; want %q", got, want)
	}
}
