package rabbitconsumer

import (
	"log/slog"
	"sync"
	"sync/atomic"

	"github.com/acemq/msgaudit/internal/consumerkit"
)

// ackChannel is the part of a channel that settles deliveries.
type ackChannel interface {
	Ack(tag uint64, multiple bool) error
	Nack(tag uint64, multiple, requeue bool) error
}

// tag states in a tracker's window.
const (
	tagRunning uint8 = iota // delivered, not settled
	tagAcked                // settled as Ack, its ack not sent yet
	tagGone                 // settled and sent: singly (nack, dead-letter ack, spill), nothing more to send
)

// tracker is the set of a channel's outstanding delivery tags: the window
// buf[head:] holds, at index i, the state of tag base+1+i; every tag up to
// base is settled and sent. It is not safe for concurrent use (the acker
// locks it).
type tracker struct {
	base uint64
	buf  []uint8
	head int
	// acked counts tagAcked entries.
	acked int
}

// win returns the window.
func (t *tracker) win() []uint8 { return t.buf[t.head:] }

// add registers a delivered tag. Tags arrive in increasing order; a tag
// skipped (none is, on a channel with one consumer) counts as settled.
func (t *tracker) add(tag uint64) {
	next := t.base + uint64(len(t.buf)-t.head) + 1
	if tag < next {
		return // not increasing: ignored, never acknowledged by a multiple ack
	}
	for ; next < tag; next++ {
		t.buf = append(t.buf, tagGone)
	}
	t.buf = append(t.buf, tagRunning)
	t.trim()
}

// index returns a tag's position in the window and whether it is there.
func (t *tracker) index(tag uint64) (int, bool) {
	if tag <= t.base || tag > t.base+uint64(len(t.buf)-t.head) {
		return 0, false
	}
	return int(tag - t.base - 1), true
}

// settleAck marks a running tag as settled with Ack; it reports false for
// a tag not running.
func (t *tracker) settleAck(tag uint64) bool {
	i, ok := t.index(tag)
	if w := t.win(); !ok || w[i] != tagRunning {
		return false
	}
	t.win()[i] = tagAcked
	t.acked++
	return true
}

// gone marks a tag settled by a frame of its own (sent).
func (t *tracker) gone(tag uint64) {
	i, ok := t.index(tag)
	if !ok {
		return
	}
	w := t.win()
	if w[i] == tagAcked {
		t.acked--
	}
	w[i] = tagGone
	t.trim()
}

// trim drops settled-and-sent tags from the front, reusing the buffer
// once the window is empty (or mostly behind its start).
func (t *tracker) trim() {
	for t.head < len(t.buf) && t.buf[t.head] == tagGone {
		t.head++
		t.base++
	}
	switch {
	case t.head == len(t.buf):
		t.buf, t.head = t.buf[:0], 0
	case t.head >= 1024 && t.head >= len(t.buf)/2:
		n := copy(t.buf, t.buf[t.head:])
		t.buf, t.head = t.buf[:n], 0
	}
}

// multiple returns the tag a multiple ack may name: the highest tag of the
// settled prefix (no running tag below or at it) that is settled as Ack
// and not sent (RabbitMQ wants the named tag outstanding), and how many
// Ack-settled tags it covers; ok is false when there is none.
func (t *tracker) multiple() (tag uint64, n int, ok bool) {
	last := -1
	for i, s := range t.win() {
		if s == tagRunning {
			break
		}
		if s == tagAcked {
			last, n = i, n+1
		}
	}
	if last < 0 {
		return 0, 0, false
	}
	return t.base + uint64(last) + 1, n, true
}

// sent records that a multiple ack named tag: every tag up to it is done.
func (t *tracker) sent(tag uint64) {
	i, ok := t.index(tag)
	if !ok {
		return
	}
	for _, s := range t.win()[:i+1] {
		if s == tagAcked {
			t.acked--
		}
	}
	t.base = tag
	t.head += i + 1
	t.trim()
}

// blocked returns the Ack-settled tags behind the first running tag.
func (t *tracker) blocked(dst []uint64) []uint64 {
	running := false
	for i, s := range t.win() {
		switch {
		case s == tagRunning:
			running = true
		case s == tagAcked && running:
			dst = append(dst, t.base+uint64(i)+1)
		}
	}
	return dst
}

// outstanding is the number of tags not settled and sent.
func (t *tracker) outstanding() int {
	n := 0
	for _, s := range t.win() {
		if s != tagGone {
			n++
		}
	}
	return n
}

// acker settles one channel's deliveries. Successes are acknowledged in
// batches: one Ack(tag, multiple=true) for the highest tag below which
// every delivery is settled, sent once the completions ready at that
// moment are all marked (whoever finds no frame being sent sends, and
// keeps sending while more become ready). Everything else — requeues,
// dead-letter acks, the hand-backs of a stop — is a frame of its own,
// serialized with the multiple acks, so that a multiple ack never covers a
// delivery not settled as Ack: a tag is left out of the outstanding set
// only once its own frame is sent. When a long-running delivery holds the
// prefix back, the successes behind it are acknowledged singly once there
// are spillAt of them, so that they do not keep the prefetch window full.
type acker struct {
	ch      ackChannel
	dead    *atomic.Bool // the generation's: nothing is sent once it is set
	st      *consumerkit.Counters
	log     *slog.Logger
	spillAt int

	mu      sync.Mutex
	idle    sync.Cond // signalled when sending ends
	t       tracker
	sending bool
	spill   []uint64
}

func newAcker(ch ackChannel, dead *atomic.Bool, st *consumerkit.Counters, log *slog.Logger, prefetch int) *acker {
	a := &acker{ch: ch, dead: dead, st: st, log: log, spillAt: max(prefetch/2, 1)}
	a.idle.L = &a.mu
	return a
}

// add registers a delivered tag; call it in delivery order, before any
// later tag can be settled.
func (a *acker) add(tag uint64) {
	a.mu.Lock()
	a.t.add(tag)
	a.mu.Unlock()
}

// ack settles tag as a success; the acknowledgement follows (by this
// goroutine or by the one sending at the moment).
func (a *acker) ack(tag uint64) {
	a.mu.Lock()
	if !a.t.settleAck(tag) {
		a.mu.Unlock()
		a.log.Warn("rabbitconsumer: success of a delivery tag not outstanding; not acknowledged", "tag", tag)
		return
	}
	if a.sending {
		a.mu.Unlock() // the sender sees it before it stops
		return
	}
	a.sending = true
	a.flushLocked()
}

// requeue hands tag back (Nack with requeue) in a frame of its own; it
// reports whether the frame was sent without error.
func (a *acker) requeue(tag uint64) bool {
	return a.single(tag, func() error { return a.ch.Nack(tag, false, true) })
}

// ackOne acknowledges tag in a frame of its own (a dead-lettered
// delivery, once its copy is confirmed); it reports whether the frame was
// sent without error.
func (a *acker) ackOne(tag uint64) bool {
	return a.single(tag, func() error { return a.ch.Ack(tag, false) })
}

// single sends op, a frame settling tag alone, serialized with the
// multiple acks, then takes tag out of the outstanding set; it reports
// whether op was sent without error.
func (a *acker) single(tag uint64, op func() error) bool {
	a.mu.Lock()
	for a.sending {
		a.idle.Wait()
	}
	a.sending = true
	a.mu.Unlock()
	ok := a.send(tag, op)
	a.mu.Lock()
	a.t.gone(tag)
	a.flushLocked()
	return ok
}

// send sends op unless the generation is dead.
func (a *acker) send(tag uint64, op func() error) bool {
	if a.dead.Load() {
		a.st.StaleAcks.Add(1)
		return false
	}
	if err := op(); err != nil {
		a.st.AckErrors.Add(1)
		a.log.Warn("rabbitconsumer: settling a delivery failed", "tag", tag, "err", err)
		return false
	}
	return true
}

// flushLocked sends what is ready, with a.mu held and a.sending set by the
// caller; it returns with a.mu released and a.sending cleared.
func (a *acker) flushLocked() {
	for {
		if tag, n, ok := a.t.multiple(); ok {
			a.mu.Unlock()
			switch {
			case a.dead.Load():
				a.st.StaleAcks.Add(uint64(n))
			default:
				if err := a.ch.Ack(tag, true); err != nil {
					a.st.AckErrors.Add(1)
					a.log.Warn("rabbitconsumer: acknowledging deliveries failed", "tag", tag, "multiple", true, "err", err)
				} else {
					a.st.Acks.Add(uint64(n))
				}
			}
			a.mu.Lock()
			a.t.sent(tag)
			continue
		}
		if a.t.acked >= a.spillAt {
			a.spill = a.t.blocked(a.spill[:0])
			if len(a.spill) >= a.spillAt {
				spill := a.spill
				a.mu.Unlock()
				for _, tag := range spill {
					if a.send(tag, func() error { return a.ch.Ack(tag, false) }) {
						a.st.Acks.Add(1)
					}
				}
				a.mu.Lock()
				for _, tag := range spill {
					a.t.gone(tag)
				}
				continue
			}
		}
		a.sending = false
		a.idle.Broadcast()
		a.mu.Unlock()
		return
	}
}

// outstanding returns how many tags are not settled and sent.
func (a *acker) outstanding() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.t.outstanding()
}
