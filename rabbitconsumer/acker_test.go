package rabbitconsumer

import (
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sort"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/acemq/msgaudit/internal/consumerkit"

	"pgregory.net/rapid"
)

// ackerBroken is set when a unit test of the acker fails. Those tests run
// before every other test of the package: this file sorts first and they
// are not parallel (a parallel test waits for every sequential one, and
// the sequential broker tests wait out deadlines of minutes on a broken
// acker). The broker tests skip once it is set (see newBroker), so a
// broken acker fails the package within seconds.
var ackerBroken atomic.Bool

// ackerUnit starts a unit test of the acker: not parallel, and marking
// the acker broken if the test fails.
func ackerUnit(t *testing.T) {
	t.Cleanup(func() {
		if t.Failed() {
			ackerBroken.Store(true)
		}
	})
}

// next returns the tag after the highest registered.
func (a *acker) next() uint64 {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.t.base + uint64(len(a.t.win())) + 1
}

// settled is how the model says a delivery ended.
type settled uint8

const (
	running   settled = iota
	asAck             // success: acknowledged with the batch
	asRequeue         // handed back (nack, requeue)
	asAckOne          // dead-lettered: acknowledged singly once its copy is confirmed
)

// brokerModel is RabbitMQ's view of one channel: the unacknowledged
// deliveries, with what the consumer settled each as. Every frame is
// checked against it: an ack or nack must name an unacknowledged tag
// (RabbitMQ closes the channel otherwise), and a multiple ack may only
// cover deliveries settled as successes.
type brokerModel struct {
	mu       sync.Mutex
	unacked  map[uint64]bool
	state    map[uint64]settled
	acked    map[uint64]bool // acknowledged (as a success or dead-lettered)
	requeued map[uint64]bool
	frames   int
	problems []string
}

func newBrokerModel() *brokerModel {
	return &brokerModel{unacked: map[uint64]bool{}, state: map[uint64]settled{}, acked: map[uint64]bool{}, requeued: map[uint64]bool{}}
}

func (b *brokerModel) deliver(tag uint64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.unacked[tag], b.state[tag] = true, running
}

func (b *brokerModel) settle(tag uint64, s settled) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.state[tag] = s
}

func (b *brokerModel) fail(format string, args ...any) {
	b.problems = append(b.problems, fmt.Sprintf(format, args...))
}

func (b *brokerModel) Ack(tag uint64, multiple bool) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.frames++
	if !b.unacked[tag] {
		b.fail("ack(%d, multiple=%t) names a tag not unacknowledged", tag, multiple)
		return nil
	}
	if !multiple {
		if s := b.state[tag]; s != asAck && s != asAckOne {
			b.fail("single ack of tag %d settled as %d", tag, s)
		}
		delete(b.unacked, tag)
		b.acked[tag] = true
		return nil
	}
	for t := range b.unacked {
		if t > tag {
			continue
		}
		if b.state[t] != asAck {
			b.fail("multiple ack(%d) covers tag %d settled as %d", tag, t, b.state[t])
		}
		delete(b.unacked, t)
		b.acked[t] = true
	}
	return nil
}

func (b *brokerModel) Nack(tag uint64, multiple, requeue bool) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.frames++
	switch {
	case multiple || !requeue:
		b.fail("nack(%d, multiple=%t, requeue=%t)", tag, multiple, requeue)
	case !b.unacked[tag]:
		b.fail("nack(%d) names a tag not unacknowledged", tag)
	case b.state[tag] != asRequeue:
		b.fail("nack of tag %d settled as %d", tag, b.state[tag])
	}
	delete(b.unacked, tag)
	b.requeued[tag] = true
	return nil
}

// check fails t with the model's problems.
func (b *brokerModel) check(t interface{ Fatalf(string, ...any) }) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.problems) > 0 {
		t.Fatalf("%d problems, first: %s", len(b.problems), b.problems[0])
	}
}

func testAcker(b *brokerModel, prefetch int) (*acker, *consumerkit.Counters) {
	st := new(consumerkit.Counters)
	return newAcker(b, new(atomic.Bool), st, slog.New(slog.DiscardHandler), prefetch), st
}

// TestAckerModel drives an acker with random deliveries and settlements,
// one at a time, against the broker model: no frame ever names a tag the
// broker does not hold or covers a delivery not settled as a success, a
// success is acknowledged as soon as nothing below it is running (or once
// spillAt successes wait behind a running one), and when every delivery
// is settled the broker holds none.
func TestAckerModel(t *testing.T) {
	ackerUnit(t)
	rapid.Check(t, func(t *rapid.T) {
		prefetch := rapid.IntRange(1, 20).Draw(t, "prefetch")
		b := newBrokerModel()
		a, st := testAcker(b, prefetch)
		var next uint64 = 1
		var running []uint64
		successes := 0
		t.Repeat(map[string]func(*rapid.T){
			"deliver": func(t *rapid.T) {
				if len(running) >= prefetch {
					t.Skip("prefetch window full")
				}
				// Tags are consecutive on a channel; a skipped one (never
				// seen by the consumer) must not hold the others back.
				if rapid.IntRange(0, 20).Draw(t, "skip") == 0 {
					next++
				}
				b.deliver(next)
				a.add(next)
				running = append(running, next)
				next++
			},
			"settle": func(t *rapid.T) {
				if len(running) == 0 {
					t.Skip("nothing running")
				}
				i := rapid.IntRange(0, len(running)-1).Draw(t, "i")
				tag := running[i]
				running = append(running[:i], running[i+1:]...)
				switch s := settled(rapid.IntRange(1, 3).Draw(t, "as")); s {
				case asAck:
					b.settle(tag, s)
					successes++
					a.ack(tag)
				case asRequeue:
					b.settle(tag, s)
					if !a.requeue(tag) {
						t.Fatalf("requeue(%d) not sent", tag)
					}
				case asAckOne:
					b.settle(tag, s)
					if !a.ackOne(tag) {
						t.Fatalf("ackOne(%d) not sent", tag)
					}
				}
			},
			"": func(t *rapid.T) {
				b.check(t)
				a.mu.Lock()
				defer a.mu.Unlock()
				if tag, _, ok := a.t.multiple(); ok {
					t.Fatalf("a multiple ack of %d is ready but was not sent", tag)
				}
				if a.t.acked >= a.spillAt {
					t.Fatalf("%d successes wait behind a running delivery (spill at %d)", a.t.acked, a.spillAt)
				}
				if a.sending {
					t.Fatal("sending after every call returned")
				}
				if n := a.t.outstanding(); n != len(running)+a.t.acked {
					t.Fatalf("outstanding %d, want %d running + %d successes waiting", n, len(running), a.t.acked)
				}
			},
		})
		// Settle the rest as successes: everything must be acknowledged.
		for _, tag := range running {
			b.settle(tag, asAck)
			successes++
			a.ack(tag)
		}
		b.check(t)
		if len(b.unacked) != 0 {
			t.Fatalf("the broker still holds %d deliveries after every one was settled", len(b.unacked))
		}
		if a.outstanding() != 0 {
			t.Fatalf("the acker still tracks %d tags", a.outstanding())
		}
		if got := st.Acks.Load(); got != uint64(successes) {
			t.Fatalf("Stats.Acks %d, want %d", got, successes)
		}
	})
}

// TestAckerBatches: completions marked while a frame is being sent go
// out together in the next one, and a dead generation sends nothing.
func TestAckerBatches(t *testing.T) {
	ackerUnit(t)
	b := newBrokerModel()
	a, st := testAcker(b, 100)
	for tag := uint64(1); tag <= 10; tag++ {
		b.deliver(tag)
		a.add(tag)
	}
	// Tag 1 is running: 2..10 succeed and wait.
	for tag := uint64(2); tag <= 10; tag++ {
		b.settle(tag, asAck)
		a.ack(tag)
	}
	if b.frames != 0 {
		t.Fatalf("%d frames sent while tag 1 runs", b.frames)
	}
	b.settle(1, asAck)
	a.ack(1)
	b.check(t)
	if b.frames != 1 || len(b.unacked) != 0 || st.Acks.Load() != 10 {
		t.Fatalf("frames %d, unacked %v, acks %d; want one frame acknowledging 10", b.frames, b.unacked, st.Acks.Load())
	}

	// Dead: nothing is sent, the successes count as stale.
	b2 := newBrokerModel()
	a2, st2 := testAcker(b2, 100)
	for tag := uint64(1); tag <= 3; tag++ {
		b2.deliver(tag)
		a2.add(tag)
	}
	a2.dead.Store(true)
	b2.settle(1, asAck)
	a2.ack(1)
	b2.settle(2, asRequeue)
	a2.requeue(2)
	if b2.frames != 0 || st2.StaleAcks.Load() != 2 {
		t.Fatalf("dead generation: %d frames, %d stale", b2.frames, st2.StaleAcks.Load())
	}
}

// TestAckerConcurrent settles deliveries from many goroutines while new
// ones arrive, against the broker model. Run it with -race.
func TestAckerConcurrent(t *testing.T) {
	ackerUnit(t)
	const total, workers, prefetch = 20000, 8, 50
	b := newBrokerModel()
	a, st := testAcker(b, prefetch)
	tags := make(chan uint64, prefetch)
	window := make(chan struct{}, prefetch) // the broker's prefetch: a slot per unsettled delivery
	var wg sync.WaitGroup
	var successes atomic.Uint64
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for tag := range tags {
				switch r := rand.IntN(20); {
				case r == 0:
					b.settle(tag, asRequeue)
					a.requeue(tag)
				case r == 1:
					b.settle(tag, asAckOne)
					a.ackOne(tag)
				default:
					b.settle(tag, asAck)
					successes.Add(1)
					a.ack(tag)
				}
				<-window
			}
		}()
	}
	for tag := uint64(1); tag <= total; tag++ {
		window <- struct{}{}
		b.deliver(tag)
		a.add(tag)
		tags <- tag
	}
	close(tags)
	wg.Wait()
	b.check(t)
	if len(b.unacked) != 0 {
		left := make([]uint64, 0, len(b.unacked))
		for tag := range b.unacked {
			left = append(left, tag)
		}
		sort.Slice(left, func(i, j int) bool { return left[i] < left[j] })
		t.Fatalf("%d deliveries never settled with the broker: %v", len(left), left[:min(len(left), 10)])
	}
	if st.Acks.Load() != successes.Load() {
		t.Fatalf("Stats.Acks %d, want %d", st.Acks.Load(), successes.Load())
	}
	t.Logf("%d deliveries settled in %d frames", total, b.frames)
}

// TestTrackerCompacts: a window that never empties moves back to the
// start of its buffer instead of growing with every tag.
func TestTrackerCompacts(t *testing.T) {
	ackerUnit(t)
	var tr tracker
	for tag := uint64(1); tag <= 10000; tag++ {
		tr.add(tag)
		if tag > 1 {
			if tag%3 == 0 {
				tr.gone(tag - 1)
			} else {
				if !tr.settleAck(tag - 1) {
					t.Fatalf("settleAck(%d) refused", tag-1)
				}
				if got, n, ok := tr.multiple(); !ok || got != tag-1 || n != 1 {
					t.Fatalf("multiple() = %d, %d, %t after tag %d", got, n, ok, tag-1)
				}
				tr.sent(tag - 1)
			}
		}
		if len(tr.buf) > 2048 {
			t.Fatalf("buffer holds %d entries for a window of %d", len(tr.buf), len(tr.win()))
		}
	}
	if tr.outstanding() != 1 || tr.base != 9999 || tr.acked != 0 {
		t.Fatalf("outstanding %d, base %d, acked %d", tr.outstanding(), tr.base, tr.acked)
	}
	if !tr.settleAck(10000) {
		t.Fatal("settleAck(10000) refused")
	}
	if got, n, ok := tr.multiple(); !ok || got != 10000 || n != 1 {
		t.Fatalf("multiple() = %d, %d, %t", got, n, ok)
	}
}
