package natsconsumer

import (
	"context"
	"testing"
	"time"

	"github.com/acemq/msgaudit/internal/testkit/testwait"
	"github.com/acemq/msgaudit/receiver"
	"github.com/nats-io/nats.go/jetstream"
)

// stopWithOneWaiting stops a consumer (one handler, two deliveries held)
// while the handler of "running" runs and "waiting" waits for the
// handler's slot ("waiting" is published once the handler of "running"
// has started, so that it cannot take the slot first); the handler returns only once the stop has handed
// "waiting" back. It returns the stream sequences of both after Run has
// returned.
func stopWithOneWaiting(t *testing.T, e *natsEnv) (running, waiting uint64) {
	t.Helper()
	entered := make(chan struct{})
	release := make(chan struct{})
	cfg := e.config(e.url, func(ctx context.Context, m *receiver.Message) error {
		if string(m.Body) == "running" {
			close(entered)
			<-release
		}
		return nil
	})
	cfg.Concurrency, cfg.InFlight = 1, 2
	cfg.Pipeline.MemoryOnly = true
	c := newConsumer(t, cfg)
	running = e.publish("running", "").Sequence
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	testwait.Recv(t, entered, testwait.Long, "the handler of the first message")
	waiting = e.publish("waiting", "").Sequence
	testwait.Until(t, testwait.Long, "the second message in the pipeline", func() bool {
		return c.Metrics().Snapshot().Delivered == 2
	})
	cancel()
	testwait.Until(t, testwait.Long, "the waiting delivery handed back", func() bool { return c.Stats().Dropped == 1 })
	close(release)
	if err, _ := testwait.Recv(t, done, testwait.Long, "Run's return"); err != nil {
		t.Fatalf("Run: %v", err)
	}
	return running, waiting
}

// TestStopHandsBackWaiting: a delivery waiting for a handler when a
// graceful stop begins is handed back with Nak, not acknowledged: the
// server delivers it again at once (AckWait is 30s), to another client of
// the durable consumer.
func TestStopHandsBackWaiting(t *testing.T) {
	e := newEnv(t, 0)
	_, waiting := stopWithOneWaiting(t, e)
	ctx := testwait.Context(t, testwait.Long)
	raw, err := e.js.Consumer(ctx, e.stream, e.consumer)
	if err != nil {
		t.Fatal(err)
	}
	b, err := raw.Fetch(2, jetstream.FetchMaxWait(3*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	var got []uint64
	for m := range b.Messages() {
		meta, err := m.Metadata()
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, meta.Sequence.Stream)
	}
	if len(got) != 1 || got[0] != waiting {
		t.Fatalf("delivered again after the stop: sequences %v; want only the handed-back %d", got, waiting)
	}
}

// TestStopAcksRunning: a handler that finishes after a graceful stop
// began is acknowledged before Run returns: the server has its Ack.
func TestStopAcksRunning(t *testing.T) {
	e := newEnv(t, 0)
	running, _ := stopWithOneWaiting(t, e)
	testwait.Until(t, 5*time.Second, "the server's ack floor at the message handled during the stop", func() bool {
		return e.info().AckFloor.Stream >= running
	})
}
