package receiver

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/acemq/msgaudit/idempotency"
	"github.com/acemq/msgaudit/internal/nilcheck"
)

// StoreSelector is the durable tier: an idempotency.Store that remembers
// finished work across restarts and consumer machines. TryClaim on
// Key{Namespace, key}:
//
//   - Claimed: Accept; Settle confirms the claim on Completed and releases
//     it on Failed or Abandoned; the claim's lease is renewed at half its
//     remaining time while the handler runs.
//   - AlreadyConfirmed: Reject("store").
//   - InProgress: Defer("in-flight") — someone holds a live claim; the
//     outcome is unknown, so never acknowledge.
//   - an error: returned (the receiver requeues; nothing is acknowledged
//     while the store cannot say). idempotency.ErrInvalidKey is wrapped in
//     ErrBadKey (dead-letter: the key will never be storable).
type StoreSelector struct {
	store      idempotency.Store
	namespace  func(m *Message) string
	renewEvery time.Duration
	now        func() time.Time
	metrics    *Metrics
}

// StoreOptions configure a StoreSelector.
type StoreOptions struct {
	// Namespace is the store namespace; "" means the message's destination.
	// Topic deliveries append "#" and the consumer (each subscriber's copy
	// is its own unit of work).
	Namespace string
	// RenewEvery is the lease renewal period; 0 means half the claim's
	// remaining lease, a negative value disables renewal.
	RenewEvery time.Duration
	// Clock is the clock the store keeps time with (for the renewal
	// period); nil means the wall clock.
	Clock idempotency.Clock
	// Metrics receives store latency and error counts; nil is allowed.
	Metrics *Metrics
}

// NewStoreSelector returns a StoreSelector over s. A nil s (including a
// nil pointer in the interface) is an error wrapping ErrConfig.
func NewStoreSelector(s idempotency.Store, o StoreOptions) (*StoreSelector, error) {
	if nilcheck.IsNil(s) {
		return nil, fmt.Errorf("%w: nil store", ErrConfig)
	}
	ns := o.Namespace
	sel := &StoreSelector{store: s, renewEvery: o.RenewEvery, now: time.Now, metrics: o.Metrics,
		namespace: func(m *Message) string {
			base := ns
			if base == "" {
				base = m.Destination
			}
			if m.IsTopic() {
				return base + "#" + m.Consumer
			}
			return base
		}}
	if o.Clock != nil {
		sel.now = o.Clock.Now
	}
	return sel, nil
}

// Name returns "store".
func (s *StoreSelector) Name() string { return "store" }

// Key returns the store key of m.
func (s *StoreSelector) Key(m *Message) idempotency.Key {
	return idempotency.Key{Namespace: s.namespace(m), ID: m.IdempotencyKey()}
}

// Select try-claims m's key.
func (s *StoreSelector) Select(ctx context.Context, m *Message) (Decision, error) {
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
	h := &held{claim: claim}
	d := Decision{Verdict: Accept, Reason: "new", Detail: "claimed", Settle: func(ctx context.Context, st Settlement) error {
		c := h.get()
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
	every := s.renewEvery
	if every == 0 {
		every = claim.Expires.Sub(s.now()) / 2
	}
	if every > 0 {
		d.RenewEvery = every
		d.Renew = func(ctx context.Context) error {
			t0 := time.Now()
			c, err := s.store.Renew(ctx, h.get())
			s.metrics.observeStore(time.Since(t0))
			if err != nil {
				s.metrics.inc(&s.metrics.StoreErrors)
				return err
			}
			h.set(c)
			return nil
		}
	}
	return d, nil
}

// held is a claim renewed from another goroutine while the handler runs.
type held struct {
	mu    sync.Mutex
	claim idempotency.Claim
}

func (h *held) get() idempotency.Claim {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.claim
}

func (h *held) set(c idempotency.Claim) {
	h.mu.Lock()
	h.claim = c
	h.mu.Unlock()
}
