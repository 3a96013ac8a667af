package inbox_test

import (
	"context"
	"database/sql"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/acemq/msgaudit/inbox"
	"github.com/acemq/msgaudit/receiver"
	"pgregory.net/rapid"
)

// outcome is what the handler does in one delivery of the property test.
type outcome int

const (
	succeed       outcome = iota // applies the effect, returns nil
	fail                         // applies the effect, returns an error
	panics                       // applies the effect, panics
	commitFails                  // applies an effect that fails the COMMIT
	commitsItself                // applies the effect and commits the tx itself
	outcomes
)

func (o outcome) String() string {
	return [...]string{"succeed", "fail", "panic", "commit-fails", "commits-itself"}[o]
}

// TestProperty drives random interleavings of deliveries, redeliveries,
// restarts (a fresh receiver: memory lost), handler failures and commit
// failures against a reference model, a set of committed keys. After every
// delivery: each key's effect is committed once if the model says the key
// is committed and never otherwise, the key's row is present exactly then,
// and no delivery is acknowledged without its key committed.
func TestProperty(t *testing.T) {
	forEachBackend(t, func(t *testing.T, newBackend func(t testing.TB) *backend) {
		b := newBackend(t)
		ib := b.newInbox(t, inbox.Options{})
		rapid.Check(t, func(rt *rapid.T) {
			run := randHex(4)
			keys := []string{"p-" + run + "-a", "p-" + run + "-b", "p-" + run + "-c"}
			committed := map[string]bool{}
			r := newReceiver(t, ib, nil)
			steps := rapid.IntRange(1, 20).Draw(rt, "steps")
			for i := range steps {
				if rapid.Bool().Draw(rt, "restart") {
					r = newReceiver(t, ib, nil)
				}
				key := rapid.SampledFrom(keys).Draw(rt, "key")
				o := outcome(rapid.IntRange(0, int(outcomes)-1).Draw(rt, "outcome"))
				ran := false
				res := process(t, r, msg(key), inbox.Handler(func(ctx context.Context, tx *sql.Tx, m *receiver.Message) error {
					ran = true
					parent := "ok"
					if o == commitFails {
						parent = "bad"
					}
					if err := b.apply(ctx, tx, m.Key, parent); err != nil {
						return err
					}
					switch o {
					case fail:
						return errHandler
					case panics:
						panic("on purpose")
					case commitsItself:
						return tx.Commit()
					}
					return nil
				}))
				// The model.
				was := committed[key]
				switch {
				case was:
					if res.Action != receiver.Ack || !res.Duplicate || ran {
						rt.Fatalf("step %d: recorded key %s: %v duplicate=%v ran=%v (%s); want a duplicate ack without running", i, key, res.Action, res.Duplicate, ran, res.Reason)
					}
				case o == succeed:
					if res.Action != receiver.Ack || res.Duplicate || !ran {
						rt.Fatalf("step %d: new key %s, handler succeeds: %v duplicate=%v ran=%v (%s, %v); want a new ack", i, key, res.Action, res.Duplicate, ran, res.Reason, res.Err)
					}
					committed[key] = true
				default:
					if res.Action != receiver.Requeue || !ran {
						rt.Fatalf("step %d: new key %s, handler %v: %v ran=%v (%s, %v); want a requeue", i, key, o, res.Action, ran, res.Reason, res.Err)
					}
					if o == commitsItself {
						committed[key] = true // the handler's own commit made both durable
					}
				}
				if res.Action == receiver.Ack && !contains(t, ib, key) {
					rt.Fatalf("step %d: %s acknowledged without a committed row", i, key)
				}
				for _, k := range keys {
					want := 0
					if committed[k] {
						want = 1
					}
					if got := b.applied(t, k); got != want {
						rt.Fatalf("step %d: key %s applied %d times; model says %d", i, k, got, want)
					}
					if got := contains(t, ib, k); got != committed[k] {
						rt.Fatalf("step %d: key %s recorded=%v; model says %v", i, k, got, committed[k])
					}
				}
			}
		})
	})
}

// TestConcurrent: workers, each with its own *sql.DB pool, inbox and
// receiver (separate processes, as far as the database can tell), deliver
// the same keys at the same time in different orders, each worker from
// three goroutines (so its deliveries form batches in its inbox's lanes),
// retrying every delivery that is not acknowledged. Every key's effect commits exactly once, and exactly
// one delivery per key is acknowledged as new work.
func TestConcurrent(t *testing.T) {
	forEachBackend(t, func(t *testing.T, newBackend func(t testing.TB) *backend) {
		b := newBackend(t)
		b.newInbox(t, inbox.Options{}) // create the table once, before the workers
		const workers, keys = 4, 30
		var fresh atomic.Int64
		var wg sync.WaitGroup
		errs := make(chan error, 3*workers)
		for w := range workers {
			db := b.open(t)
			wib, err := inbox.New(context.Background(), db, inbox.Options{Dialect: b.dialect, Table: b.table})
			if err != nil {
				t.Fatal(err)
			}
			r := newReceiver(t, wib, nil)
			order := rand.New(rand.NewPCG(uint64(w), 7)).Perm(keys)
			for g := range 3 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					h := inbox.Handler(func(ctx context.Context, tx *sql.Tx, m *receiver.Message) error {
						return b.apply(ctx, tx, m.Key, "ok")
					})
					for j, i := range order {
						if j%3 != g {
							continue
						}
						key := fmt.Sprintf("c-%d", i)
						for try := 0; ; try++ {
							res := process(t, r, msg(key), h)
							if res.Action == receiver.Ack {
								if !res.Duplicate {
									fresh.Add(1)
								}
								break
							}
							if res.Action == receiver.DeadLetter || try == 200 {
								errs <- fmt.Errorf("key %s: not acknowledged after %d tries: %v %s %v", key, try+1, res.Action, res.Reason, res.Err)
								return
							}
						}
					}
				}()
			}
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Error(err)
		}
		for i := range keys {
			key := fmt.Sprintf("c-%d", i)
			if n := b.applied(t, key); n != 1 {
				t.Errorf("key %s applied %d times; want 1", key, n)
			}
		}
		if n := fresh.Load(); n != keys {
			t.Errorf("%d deliveries acknowledged as new work; want %d (one per key)", n, keys)
		}
	})
}
