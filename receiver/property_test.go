package receiver_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/acemq/msgaudit/receiver"
	"pgregory.net/rapid"
)

// world is a reference model of an at-least-once broker feeding one
// consumer process that may crash: deliveries stay pending until acked,
// anything not acked comes back (redelivered), failover replays copies of
// acked messages, and the consumer's memory (audit, table) is lost on a
// crash while the store survives. The ledger records every application of
// a message's effect.
type world struct {
	t         *rapid.T
	withStore bool
	clock     *manualClock
	store     *fakeStore
	audit     *fakeAudit
	r         *receiver.Receiver
	cfg       receiver.Config

	sent    int
	pending []*delivery

	mu         sync.Mutex
	ledger     map[string]int
	problems   []string
	acks       int
	dupAcks    int
	crashes    int
	deliveries int
}

type delivery struct {
	key         string
	redelivered bool
}

// mode is how the handler behaves on one delivery.
type mode int

const (
	modeOK mode = iota
	modeError
	modePanic
	modeCrash   // the process dies inside the handler, before the effect
	modeAckLost // the handler succeeds, the ack never reaches the broker, the process dies
)

func newWorld(t *rapid.T, withStore bool) *world {
	w := &world{t: t, withStore: withStore, clock: newClock(), audit: newFakeAudit(), ledger: map[string]int{}}
	w.cfg = receiver.Config{Audit: w.audit, MaxAttempts: 1 << 30, InFlightWait: time.Minute, Clock: w.clock,
		Completed: rapid.IntRange(1, 64).Draw(t, "completed")}
	if withStore {
		w.store = newFakeStore(w.clock)
		w.cfg.Store = w.store
	} else {
		w.cfg.MemoryOnly = true
	}
	w.boot(w.audit)
	return w
}

func (w *world) boot(a *fakeAudit) {
	w.audit = a
	w.cfg.Audit = a
	r, err := receiver.New(w.cfg)
	if err != nil {
		w.t.Fatal(err)
	}
	w.r = r
}

func (w *world) problem(format string, args ...any) {
	w.mu.Lock()
	w.problems = append(w.problems, fmt.Sprintf(format, args...))
	w.mu.Unlock()
}

func (w *world) handler(md mode) receiver.Handler {
	return func(ctx context.Context, m *receiver.Message) error {
		switch md {
		case modeError:
			return errors.New("handler failed")
		case modePanic:
			panic("handler panicked")
		case modeCrash:
			runtime.Goexit() // the process dies here: nothing after runs
		}
		w.mu.Lock()
		defer w.mu.Unlock()
		w.ledger[m.Key]++
		if w.ledger[m.Key] > 1 {
			w.problems = append(w.problems, fmt.Sprintf("%s applied %d times", m.Key, w.ledger[m.Key]))
		}
		return nil
	}
}

// process delivers d once; it reports the result, or ok=false if the
// process crashed inside the handler.
func (w *world) process(d *delivery, md mode) (receiver.Result, bool) {
	m := &receiver.Message{Key: d.key, Destination: queue, Consumer: "c1", Redelivered: d.redelivered}
	done := make(chan receiver.Result, 1)
	go func() {
		defer close(done)
		done <- w.r.Process(context.Background(), m, w.handler(md))
	}()
	var res receiver.Result
	var ok bool
	select {
	case res, ok = <-done:
	case <-time.After(time.Minute):
		w.problem("Process of %s did not return within a minute", d.key)
		return receiver.Result{}, false
	}
	w.mu.Lock()
	w.deliveries++
	if ok && res.Action == receiver.Ack {
		w.acks++
		if !res.Ran {
			w.dupAcks++
		}
		// Nothing is acknowledged before its effect is applied: a
		// duplicate acked while its original's outcome was unknown would
		// show here as an ack of an unapplied message.
		if w.ledger[d.key] != 1 {
			w.problems = append(w.problems, fmt.Sprintf("%s acked (%s, %s) with ledger %d", d.key, res.Reason, res.Trace, w.ledger[d.key]))
		}
	}
	if ok && res.Action == receiver.DeadLetter {
		w.problems = append(w.problems, fmt.Sprintf("%s dead-lettered: %s", d.key, res.Reason))
	}
	w.mu.Unlock()
	return res, ok
}

// settle applies the broker side of a result to pending index i.
func (w *world) settle(d *delivery, res receiver.Result, ok bool) {
	if ok && res.Action == receiver.Ack {
		for i, p := range w.pending {
			if p == d {
				w.pending = append(w.pending[:i], w.pending[i+1:]...)
				return
			}
		}
	}
	d.redelivered = true
}

func (w *world) crash() {
	w.crashes++
	w.boot(newFakeAudit())
}

func (w *world) actions() map[string]func(*rapid.T) {
	a := map[string]func(*rapid.T){
		"send": func(t *rapid.T) {
			if w.sent >= 40 {
				t.Skip("enough messages")
			}
			w.sent++
			w.pending = append(w.pending, &delivery{key: fmt.Sprintf("ID:prod-1:%d", w.sent)})
		},
		"deliver": func(t *rapid.T) {
			if len(w.pending) == 0 {
				t.Skip("nothing pending")
			}
			d := w.pending[rapid.IntRange(0, len(w.pending)-1).Draw(t, "i")]
			max := int(modePanic)
			if w.withStore {
				max = int(modeAckLost)
			}
			md := mode(rapid.IntRange(0, max).Draw(t, "mode"))
			res, ok := w.process(d, md)
			if md == modeAckLost && ok {
				ok = false // the ack is lost with the process
				w.crash()
			} else if !ok {
				w.crash()
			}
			w.settle(d, res, ok)
		},
		"replay acked": func(t *rapid.T) {
			// Failover replays a copy of an already delivered message.
			if w.sent == 0 {
				t.Skip("nothing sent")
			}
			k := fmt.Sprintf("ID:prod-1:%d", rapid.IntRange(1, w.sent).Draw(t, "seq"))
			w.pending = append(w.pending, &delivery{key: k, redelivered: rapid.Bool().Draw(t, "flag")})
		},
		"concurrent duplicates": func(t *rapid.T) {
			if len(w.pending) == 0 {
				t.Skip("nothing pending")
			}
			d := w.pending[rapid.IntRange(0, len(w.pending)-1).Draw(t, "i")]
			c := &delivery{key: d.key, redelivered: true}
			w.pending = append(w.pending, c)
			m1 := mode(rapid.IntRange(0, int(modePanic)).Draw(t, "mode1"))
			m2 := mode(rapid.IntRange(0, int(modePanic)).Draw(t, "mode2"))
			var wg sync.WaitGroup
			var r1, r2 receiver.Result
			var ok1, ok2 bool
			wg.Add(2)
			go func() { defer wg.Done(); r1, ok1 = w.process(d, m1) }()
			go func() { defer wg.Done(); r2, ok2 = w.process(c, m2) }()
			wg.Wait()
			w.settle(d, r1, ok1)
			w.settle(c, r2, ok2)
		},
		"graceful restart from snapshot": func(t *rapid.T) {
			// Nothing is in flight between actions, so the snapshot holds
			// only finished work.
			w.boot(w.audit.snapshot())
		},
	}
	if w.withStore {
		a["restart with empty memory"] = func(t *rapid.T) { w.crash() }
		a["time passes"] = func(t *rapid.T) {
			w.clock.Advance(time.Duration(rapid.IntRange(0, 120).Draw(t, "seconds")) * time.Second)
		}
		a["store outage"] = func(t *rapid.T) {
			w.store.setFail("tryclaim", rapid.IntRange(1, 3).Draw(t, "calls"))
		}
	}
	a[""] = func(t *rapid.T) {
		w.mu.Lock()
		defer w.mu.Unlock()
		if len(w.problems) > 0 {
			t.Fatal(w.problems)
		}
	}
	return a
}

// drain delivers until nothing is pending: the broker keeps redelivering,
// handlers now succeed, and stuck claims expire.
func (w *world) drain() {
	if w.withStore {
		w.store.setFail("tryclaim", 0)
		w.clock.Advance(2 * time.Minute)
	}
	for round := 0; len(w.pending) > 0; round++ {
		if round > 10 {
			w.t.Fatalf("%d deliveries still pending after %d rounds", len(w.pending), round)
		}
		for _, d := range append([]*delivery(nil), w.pending...) {
			res, ok := w.process(d, modeOK)
			w.settle(d, res, ok)
		}
	}
	for i := 1; i <= w.sent; i++ {
		k := fmt.Sprintf("ID:prod-1:%d", i)
		if w.ledger[k] != 1 {
			w.problem("%s applied %d times at the end (lost if 0)", k, w.ledger[k])
		}
	}
	if len(w.problems) > 0 {
		w.t.Fatal(w.problems)
	}
}

// TestExactlyOnceProperty checks, over random interleavings of sends,
// deliveries, redeliveries, failover replays, handler failures and panics,
// concurrent duplicate deliveries, crashes (memory lost, store kept),
// restarts from an audit snapshot, store outages and lease expiry, that
// every message's effect is applied exactly once, none is lost, and no
// delivery is acknowledged before its message's effect is applied.
func TestExactlyOnceProperty(t *testing.T) {
	t.Parallel()
	for _, withStore := range []bool{true, false} {
		t.Run(fmt.Sprintf("store=%v", withStore), func(t *testing.T) {
			t.Parallel()
			rapid.Check(t, func(t *rapid.T) {
				w := newWorld(t, withStore)
				t.Repeat(w.actions())
				w.drain()
			})
		})
	}
}
