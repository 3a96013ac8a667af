package receiver_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/acemq/msgaudit/connaudit"
	"github.com/acemq/msgaudit/idempotency"
	"github.com/acemq/msgaudit/receiver"
)

// TestConcurrentExactlyOnce delivers every key several times at once from
// many goroutines (redeliveries racing their originals) with failing
// handlers, and retries each copy until it is acknowledged. Every key must
// be applied exactly once, and no copy acknowledged before its key's
// effect is applied. Run it with -race.
func TestConcurrentExactlyOnce(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		wait  time.Duration
		store bool
	}{
		{"wait/store", 0, true},
		{"requeue/store", -1, true},
		{"wait/memory", 0, false},
		{"requeue/memory", -1, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ca, err := connaudit.New(connaudit.Options{})
			if err != nil {
				t.Fatal(err)
			}
			cfg := receiver.Config{Audit: receiver.ConnAudit(ca), InFlightWait: tc.wait, MaxAttempts: 1 << 20}
			if tc.store {
				s := memStore(t, idempotency.Options{})
				defer s.Close()
				cfg.Store = s
			} else {
				cfg.MemoryOnly = true
			}
			r, err := receiver.New(cfg)
			if err != nil {
				t.Fatal(err)
			}
			const keys, copies, workers = 300, 3, 8
			var mu sync.Mutex
			applied := map[string]int{}
			var problems []string
			h := func(ctx context.Context, m *receiver.Message) error {
				if rand.IntN(5) == 0 {
					return errors.New("flaky")
				}
				if rand.IntN(50) == 0 {
					panic("flaky panic")
				}
				mu.Lock()
				defer mu.Unlock()
				applied[m.Key]++
				if applied[m.Key] > 1 {
					problems = append(problems, m.Key+" applied twice")
				}
				return nil
			}
			// Every copy is retried until acknowledged, but not past this
			// deadline: a key that is never acknowledged fails the test
			// instead of spinning until the package timeout.
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			work := make(chan string)
			var wg sync.WaitGroup
			for range workers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for k := range work {
						for {
							res := r.Process(ctx, &receiver.Message{Key: k, Destination: "/queue/race"}, h)
							if res.Action == receiver.Ack {
								mu.Lock()
								if applied[k] != 1 {
									problems = append(problems, fmt.Sprintf("%s acked with %d applications (%+v)", k, applied[k], res))
								}
								mu.Unlock()
								break
							}
							if res.Action != receiver.Requeue {
								mu.Lock()
								problems = append(problems, fmt.Sprintf("%s: %+v", k, res))
								mu.Unlock()
								break
							}
							if ctx.Err() != nil {
								mu.Lock()
								problems = append(problems, fmt.Sprintf("%s not acknowledged within the test's deadline (last result %+v)", k, res))
								mu.Unlock()
								break
							}
							time.Sleep(time.Duration(rand.IntN(100)) * time.Microsecond)
						}
					}
				}()
			}
			order := make([]string, 0, keys*copies)
			for i := range keys {
				for range copies {
					order = append(order, fmt.Sprintf("ID:race-1-2-0:1:%d", i+1))
				}
			}
			rand.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
			for _, k := range order {
				select {
				case work <- k:
				case <-time.After(testWait + time.Minute):
					t.Fatalf("no worker took key %s: the workers are stuck", k)
				}
			}
			close(work)
			waitGroup(t, &wg, testWait+time.Minute, "the workers finishing every key")
			if len(problems) > 0 {
				t.Fatal(problems)
			}
			if len(applied) != keys {
				t.Fatalf("%d keys applied, want %d", len(applied), keys)
			}
			if n := receiver.InFlightCount(r); n != 0 {
				t.Fatalf("%d in flight at the end", n)
			}
			s := r.Metrics().Snapshot()
			if s.Processed != keys || s.Duplicates() == 0 {
				t.Fatalf("metrics %+v", s)
			}
		})
	}
}
