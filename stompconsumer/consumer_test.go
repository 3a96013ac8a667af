package stompconsumer

import (
	"context"
	"runtime/pprof"
	"strings"
	"testing"
	"time"

	"github.com/acemq/msgaudit/receiver"
)

// runConsumer starts c.Run in the background; stop cancels it and returns
// Run's error.
func runConsumer(t *testing.T, c *Consumer) (stop func() error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	var once bool
	var err error
	stop = func() error {
		if !once {
			once = true
			cancel()
			select {
			case err = <-done:
			case <-time.After(60 * time.Second):
				var stacks strings.Builder
				_ = pprof.Lookup("goroutine").WriteTo(&stacks, 1)
				t.Fatalf("Run did not return within 60s of cancel; goroutines:\n%s", stacks.String())
			}
		}
		return err
	}
	t.Cleanup(func() { _ = stop() })
	return stop
}

func TestConsumeQueue(t *testing.T) {
	addr := stompAddr(t)
	q := "/queue/" + uniq("msgaudit.basic")
	tag := uniq("tag")
	const n = 200
	produce(t, addr, q, tag, n, nil)
	l := newLedger()
	c, err := New(Config{
		Addresses:             []string{addr},
		Subscriptions:         []Subscription{{Destination: q, Handler: l.handler(0, 0)}},
		DeadLetterDestination: noDeadLetters(t, addr),
		Pipeline:              receiver.Config{MemoryOnly: true}})
	if err != nil {
		t.Fatal(err)
	}
	stop := runConsumer(t, c)
	waitFor(t, 30*time.Second, "all messages applied", func() bool { return l.count() == n })
	if err := stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}
	l.verify(t, n)
	if left := drain(t, addr, q, 300*time.Millisecond); len(left) != 0 {
		t.Errorf("queue not empty after stop: %d left", len(left))
	}
	checkBrokerDLQ(t, addr, q)
	t.Logf("stats %+v metrics %+v", c.Stats(), c.Metrics().Snapshot())
}
