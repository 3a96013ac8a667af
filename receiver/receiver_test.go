package receiver_test

import (
	"context"
	"errors"
	"testing"

	"github.com/acemq/msgaudit/receiver"
)

func TestProcessTableOnly(t *testing.T) {
	t.Parallel()
	r, err := receiver.New(receiver.Config{})
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	h := func(context.Context, *receiver.Message) error { n++; return nil }
	m := &receiver.Message{Key: "ID:a:1", Destination: "/queue/q"}
	if res := r.Process(context.Background(), m, h); res.Action != receiver.Ack || res.Duplicate {
		t.Fatalf("first: %+v", res)
	}
	m2 := &receiver.Message{Key: "ID:a:1", Destination: "/queue/q", Redelivered: true}
	if res := r.Process(context.Background(), m2, h); res.Action != receiver.Ack || !res.Duplicate || res.Reason != "audit" {
		t.Fatalf("second: %+v", res)
	}
	if n != 1 {
		t.Fatalf("handler ran %d times", n)
	}
	fail := func(context.Context, *receiver.Message) error { return errors.New("boom") }
	m3 := &receiver.Message{Key: "ID:a:2", Destination: "/queue/q"}
	if res := r.Process(context.Background(), m3, fail); res.Action != receiver.Requeue {
		t.Fatalf("fail: %+v", res)
	}
	if res := r.Process(context.Background(), m3, h); res.Action != receiver.Ack || res.Duplicate || res.Attempt != 2 {
		t.Fatalf("retry: %+v", res)
	}
}
