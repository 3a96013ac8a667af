package receiver_test

import (
	"context"
	"errors"
	"github.com/acemq/msgaudit/internal/testkit/logbuf"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/acemq/msgaudit/receiver"
)

// TestInFlightGauge: Metrics' snapshot counts the deliveries inside
// Process and dates the oldest from when it entered; a stuck handler's
// age grows, and both go back to zero when it returns.
func TestInFlightGauge(t *testing.T) {
	m := new(receiver.Metrics)
	r, err := receiver.New(receiver.Config{MemoryOnly: true, Metrics: m, Handlers: 4})
	if err != nil {
		t.Fatal(err)
	}
	if s := m.Snapshot(); s.InFlight != 0 || s.OldestInFlight != 0 {
		t.Fatalf("before any delivery: InFlight %d, OldestInFlight %v; want 0, 0", s.InFlight, s.OldestInFlight)
	}
	release := make(chan struct{})
	entered := make(chan time.Time, 2)
	stuck := func(ctx context.Context, _ *receiver.Message) error {
		entered <- time.Now()
		<-release
		return nil
	}
	var wg sync.WaitGroup
	start := time.Now()
	for _, k := range []string{"a", "b"} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r.Process(context.Background(), msg(k), stuck)
		}()
	}
	first := <-entered
	second := <-entered
	if second.Before(first) {
		first = second
	}
	time.Sleep(20 * time.Millisecond)
	before := time.Now()
	s := m.Snapshot()
	after := time.Now()
	// The oldest entered Process after start and before its handler ran.
	if s.InFlight != 2 || s.OldestInFlight < before.Sub(first) || s.OldestInFlight > after.Sub(start) {
		t.Errorf("two stuck handlers: InFlight %d, OldestInFlight %v; want 2 and between %v and %v",
			s.InFlight, s.OldestInFlight, before.Sub(first), after.Sub(start))
	}
	time.Sleep(20 * time.Millisecond)
	if s2 := m.Snapshot(); s2.OldestInFlight <= s.OldestInFlight {
		t.Errorf("the stuck handlers' age did not grow: %v, then %v", s.OldestInFlight, s2.OldestInFlight)
	}
	close(release)
	wg.Wait()
	if s := m.Snapshot(); s.InFlight != 0 || s.OldestInFlight != 0 {
		t.Errorf("after both returned: InFlight %d, OldestInFlight %v; want 0, 0", s.InFlight, s.OldestInFlight)
	}
}

// TestSlowAfter: a delivery still running after SlowAfter is logged once,
// while it runs, with its key; a delivery that returns in time is not
// logged; a negative SlowAfter is a configuration error.
func TestSlowAfter(t *testing.T) {
	var buf logbuf.Buffer
	logger := slog.New(slog.NewTextHandler(&buf, nil))
	r, err := receiver.New(receiver.Config{MemoryOnly: true, Logger: logger, SlowAfter: 30 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	r.Process(context.Background(), msg("fast"), func(context.Context, *receiver.Message) error { return nil })

	const line = "receiver: delivery still in progress"
	logged := make(chan struct{})
	res := r.Process(context.Background(), msg("stuck-key"), func(ctx context.Context, _ *receiver.Message) error {
		deadline := time.Now().Add(10 * time.Second)
		for !strings.Contains(buf.String(), line) {
			if time.Now().After(deadline) {
				return errors.New("not logged while running")
			}
			time.Sleep(5 * time.Millisecond)
		}
		close(logged)
		time.Sleep(100 * time.Millisecond) // more than SlowAfter again: still one line
		return nil
	})
	select {
	case <-logged:
	default:
		t.Fatalf("the slow delivery was not logged while it ran: %+v\nlog:\n%s", res, buf.String())
	}
	out := buf.String()
	if n := strings.Count(out, line); n != 1 || !strings.Contains(out, "key=stuck-key") || strings.Contains(out, "key=fast") {
		t.Errorf("log has %d slow-delivery lines; want one, for stuck-key only:\n%s", n, out)
	}

	if _, err := receiver.New(receiver.Config{MemoryOnly: true, SlowAfter: -time.Second}); !errors.Is(err, receiver.ErrConfig) {
		t.Errorf("negative SlowAfter: %v; want ErrConfig", err)
	}
}
