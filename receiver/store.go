package receiver

import (
	"container/heap"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/acemq/msgaudit/idempotency"
	"github.com/acemq/msgaudit/internal/keyjoin"
	"github.com/acemq/msgaudit/internal/nilcheck"
)

// storeSelector is the durable tier: an idempotency.Store that remembers
// finished work across restarts and consumer machines. TryClaim on
// Key{Namespace, key}:
//
//   - Claimed: Accept; Settle confirms the claim on Completed and releases
//     it on Failed or Abandoned. From the claim until its Settle — while
//     the delivery waits for a handler, while the handler runs, until the
//     confirm — the claim's lease is renewed at half its remaining time
//     (storeOptions.RenewEvery). One goroutine per selector renews every
//     held claim; it runs only while claims are held. A renewal that finds
//     the claim lost cancels the delivery's handler context with
//     idempotency.ErrClaimLost as its cause.
//   - AlreadyConfirmed: Reject("store").
//   - InProgress: Defer("in-flight") — someone holds a live claim; the
//     outcome is unknown, so never acknowledge.
//   - an error: returned (the receiver requeues; nothing is acknowledged
//     while the store cannot say). idempotency.ErrInvalidKey is wrapped in
//     ErrBadKey (dead-letter: the key will never be storable).
type storeSelector struct {
	store      idempotency.Store
	namespace  func(m *Message) string
	renewEvery time.Duration
	now        func() time.Time
	metrics    *Metrics
	renewals   renewer
}

// storeOptions configure a storeSelector.
type storeOptions struct {
	// Namespace is the store namespace; "" means the message's destination.
	// Topic deliveries append "#" and the consumer (each subscriber's copy
	// is its own unit of work), with '%' and '#' in the consumer written
	// "%25" and "%23" so that two different pairs never share a namespace.
	Namespace string
	// RenewEvery is the lease renewal period; 0 means half the claim's
	// remaining lease, a negative value disables renewal.
	RenewEvery time.Duration
	// Clock is the clock the store keeps time with (for the renewal
	// period); nil means the wall clock.
	Clock idempotency.Clock
	// Metrics receives store latency and error counts; nil is allowed.
	Metrics *Metrics
	// Logger receives renewal failures and lost claims; nil is silent.
	Logger *slog.Logger
}

// newStoreSelector returns a storeSelector over s. A nil s (including a
// nil pointer in the interface) is an error wrapping ErrConfig.
func newStoreSelector(s idempotency.Store, o storeOptions) (*storeSelector, error) {
	if nilcheck.IsNil(s) {
		return nil, fmt.Errorf("%w: nil store", ErrConfig)
	}
	ns := o.Namespace
	sel := &storeSelector{store: s, renewEvery: o.RenewEvery, now: time.Now, metrics: o.Metrics,
		namespace: func(m *Message) string {
			base := ns
			if base == "" {
				base = m.Destination
			}
			if m.IsTopic() {
				return keyjoin.Topic(base, m.Consumer)
			}
			return base
		}}
	if o.Clock != nil {
		sel.now = o.Clock.Now
	}
	sel.renewals.init(s, o.Metrics, orDiscard(o.Logger))
	return sel, nil
}

// Name returns "store".
func (s *storeSelector) Name() string { return "store" }

// Key returns the store key of m.
func (s *storeSelector) Key(m *Message) idempotency.Key {
	return idempotency.Key{Namespace: s.namespace(m), ID: m.IdempotencyKey()}
}

// Select try-claims m's key.
func (s *storeSelector) Select(ctx context.Context, m *Message) (Decision, error) {
	key := s.Key(m)
	t0 := time.Now()
	out, claim, err := s.store.TryClaim(ctx, key)
	s.metrics.observeStore(time.Since(t0))
	if err != nil {
		s.metrics.inc(&s.metrics.StoreErrors)
		if errors.Is(err, idempotency.ErrInvalidKey) {
			return Decision{}, fmt.Errorf("%w: %w", ErrBadKey, err)
		}
		return Decision{}, err
	}
	switch out {
	case idempotency.AlreadyConfirmed:
		return Decision{Verdict: Reject, Reason: "store", Detail: "confirmed"}, nil
	case idempotency.InProgress:
		return Decision{Verdict: Defer, Reason: "in-flight", Detail: "in-progress"}, nil
	case idempotency.Claimed:
	default:
		return Decision{}, fmt.Errorf("receiver: store returned outcome %v", out)
	}
	h := &held{claim: claim, index: -1}
	every := s.renewEvery
	if every == 0 {
		every = claim.Expires.Sub(s.now()) / 2
	}
	d := Decision{Verdict: Accept, Reason: "new", Detail: "claimed", Settle: func(ctx context.Context, st Settlement) error {
		c := s.renewals.remove(h)
		t0 := time.Now()
		var err error
		if st == Completed {
			err = s.store.Confirm(ctx, c)
		} else {
			err = s.store.Release(ctx, c)
		}
		s.metrics.observeStore(time.Since(t0))
		if err != nil {
			s.metrics.inc(&s.metrics.StoreErrors)
			return fmt.Errorf("store %s: %w", st, err) // err names its package
		}
		return nil
	}}
	if every > 0 {
		h.every = every
		d.Context = h.handlerContext
		s.renewals.add(h)
	}
	return d, nil
}

// renewTimeout bounds one lease renewal.
const renewTimeout = 10 * time.Second

// held is one claim from its TryClaim to its Settle: renewed by the
// selector's renewer, read by Settle. mu orders a renewal against the
// Settle: Settle waits for a renewal in flight, and no renewal starts
// after it. cmu guards the handler context's cancellation, so making the
// handler's context never waits for a renewal's round trip.
type held struct {
	mu      sync.Mutex
	claim   idempotency.Claim
	every   time.Duration
	settled bool

	cmu    sync.Mutex
	lost   error                   // the renewal that found the claim lost
	cancel context.CancelCauseFunc // the handler context's, once made

	// Guarded by the renewer's mu.
	due   time.Time
	index int // in the renewer's heap; -1 when not in it
}

// handlerContext is the decision's Context hook: it derives the handler's
// context, which a lost claim cancels (at once, if the claim was lost
// while the delivery waited for a handler).
func (h *held) handlerContext(ctx context.Context) context.Context {
	hctx, cancel := context.WithCancelCause(ctx)
	h.cmu.Lock()
	h.cancel = cancel
	if h.lost != nil {
		cancel(h.lost)
	}
	h.cmu.Unlock()
	return hctx
}

// end records err (non-nil: the claim is lost) and cancels the handler
// context, if made, with it as the cause.
func (h *held) end(err error) {
	h.cmu.Lock()
	if err != nil {
		h.lost = err
	}
	if h.cancel != nil {
		h.cancel(err)
	}
	h.cmu.Unlock()
}

// renewer renews the held claims of one storeSelector: a min-heap of
// claims by due time and one goroutine, started when the first claim is
// added and gone when none is left.
type renewer struct {
	store   idempotency.Store
	metrics *Metrics
	log     *slog.Logger

	mu      sync.Mutex
	heap    []*held
	running bool
	wake    chan struct{} // capacity 1: the earliest due time changed
	timer   *time.Timer   // the goroutine's
}

func (r *renewer) init(s idempotency.Store, m *Metrics, log *slog.Logger) {
	r.store, r.metrics, r.log = s, m, log
	r.wake = make(chan struct{}, 1)
	r.timer = time.NewTimer(time.Hour)
	r.timer.Stop()
}

// add schedules h's first renewal one period from now.
func (r *renewer) add(h *held) {
	r.mu.Lock()
	h.due = time.Now().Add(h.every)
	r.push(h)
	if !r.running {
		r.running = true
		go r.run()
	}
	r.mu.Unlock()
}

// remove settles h: it waits for a renewal of h in flight, unschedules h
// and cancels its handler context (the handler has returned, or never
// runs). It returns the claim as last renewed.
func (r *renewer) remove(h *held) idempotency.Claim {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.settled = true
	h.end(nil)
	r.mu.Lock()
	if h.index >= 0 {
		heap.Remove((*heldHeap)(&r.heap), h.index)
		if len(r.heap) == 0 {
			r.signal() // let the goroutine exit now rather than at a stale due time
		}
	}
	r.mu.Unlock()
	return h.claim
}

// push adds h to the heap, waking the goroutine when h is now the
// earliest. r.mu is held.
func (r *renewer) push(h *held) {
	heap.Push((*heldHeap)(&r.heap), h)
	if h.index == 0 {
		r.signal()
	}
}

func (r *renewer) signal() {
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// run renews claims as they fall due, until none is held.
func (r *renewer) run() {
	for {
		r.mu.Lock()
		if len(r.heap) == 0 {
			r.running = false
			r.mu.Unlock()
			return
		}
		next := r.heap[0]
		if wait := time.Until(next.due); wait > 0 {
			r.mu.Unlock()
			r.timer.Reset(wait)
			select {
			case <-r.timer.C:
			case <-r.wake:
				r.timer.Stop()
			}
			continue
		}
		heap.Pop((*heldHeap)(&r.heap))
		r.mu.Unlock()
		r.renew(next)
	}
}

// renew renews h's lease and schedules its next renewal, unless h was
// settled meanwhile or its claim is lost (then the handler context is
// cancelled with the loss as its cause).
func (r *renewer) renew(h *held) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.settled {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), renewTimeout)
	t0 := time.Now()
	c, err := r.store.Renew(ctx, h.claim)
	cancel()
	r.metrics.observeStore(time.Since(t0))
	if err != nil {
		r.metrics.inc(&r.metrics.StoreErrors)
		if errors.Is(err, idempotency.ErrClaimLost) {
			r.log.Warn("receiver: claim lost before the delivery settled; cancelling its handler", "err", err)
			h.end(err)
			return
		}
		r.log.Warn("receiver: claim renewal failed", "err", err)
	} else {
		h.claim = c
	}
	r.mu.Lock()
	h.due = time.Now().Add(h.every)
	r.push(h)
	r.mu.Unlock()
}

// heldHeap orders held claims by due time for container/heap.
type heldHeap []*held

func (q heldHeap) Len() int           { return len(q) }
func (q heldHeap) Less(i, j int) bool { return q[i].due.Before(q[j].due) }
func (q heldHeap) Swap(i, j int) {
	q[i], q[j] = q[j], q[i]
	q[i].index, q[j].index = i, j
}

func (q *heldHeap) Push(x any) {
	h := x.(*held)
	h.index = len(*q)
	*q = append(*q, h)
}

func (q *heldHeap) Pop() any {
	old := *q
	n := len(old)
	h := old[n-1]
	old[n-1] = nil
	h.index = -1
	*q = old[:n-1]
	return h
}
