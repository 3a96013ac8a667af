package receiver

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/acemq/msgaudit/idempotency"
	"github.com/acemq/msgaudit/internal/nilcheck"
	lru "github.com/hashicorp/golang-lru/v2"
)

// DuplicatePolicy is what happens to a confirmed duplicate (a Reject).
// No policy ever acknowledges a delivery whose original's outcome is
// unknown: those are Deferred (requeued) whatever the policy.
type DuplicatePolicy uint8

const (
	// DuplicateDrop acknowledges the duplicate without running the handler,
	// logs it at warn and counts it (Fency's behaviour; the default).
	DuplicateDrop DuplicatePolicy = iota
	// DuplicateDeadLetter dead-letters it with the reason
	// "duplicate:<tier>" (ActiveMQ's poison ack).
	DuplicateDeadLetter
	// DuplicateDeliver hands it to the handler marked: m.Duplicate = true
	// and the header "duplicate: true" (Spring's duplicateMessage header).
	DuplicateDeliver
	// DuplicateHook calls Config.OnDuplicate, then acknowledges (Spring's
	// discard channel, Camel's onDuplicateMessage).
	DuplicateHook
)

// MissingKeyPolicy is what happens to a delivery without a key.
type MissingKeyPolicy uint8

const (
	// MissingKeyDeadLetter dead-letters it with reason "missing-key" (the
	// default). Never a crash, never a silent drop.
	MissingKeyDeadLetter MissingKeyPolicy = iota
	// MissingKeyProcess runs the handler without duplicate detection
	// (counted in Metrics.MissingKeys, logged at warn).
	MissingKeyProcess
)

// Config configures a Receiver. The zero value is usable: a table-only
// memory tier (in-flight and completed keys, no audit, no store), drop
// duplicates, 5 attempts.
type Config struct {
	// Audit is the connection audit (ConnAudit wraps *connaudit.Audit). It
	// is owned by the Receiver, not by a connection, so it survives
	// reconnects. nil: the memory tier tracks keys in its table only.
	Audit Auditor
	// Store is the optional durable tier. nil means none (the memory tier
	// alone: nothing survives a restart); a non-nil interface holding a nil
	// pointer (a store whose Open error went unchecked) is an error from
	// New.
	Store idempotency.Store
	// StoreBatch groups the store calls of concurrent deliveries
	// (idempotency.Group) when Store is an idempotency.BatchStore: it is
	// the largest batch (GroupOptions.MaxBatch). 0 means
	// idempotency.DefaultGroupMaxBatch, except for the in-process
	// *idempotency.Memory, which is not grouped by default (a batch saves
	// it no round trip, and the hand-off to the batching goroutine costs
	// more than its calls); 1 turns grouping off; a negative value is an
	// error from New.
	StoreBatch int
	// StoreLinger is how long a grouped store call may wait for others to
	// share its batch (GroupOptions.Linger); 0, the default, means no
	// waiting: calls that arrive while a batch is in flight form the next
	// one. A negative value is an error from New.
	StoreLinger time.Duration
	// Namespace is the store namespace (see StoreOptions.Namespace).
	Namespace string
	// Selectors are extra selectors run after the store (for example a
	// metadata-store selector); they count as durable tiers. A nil entry,
	// or one holding a nil pointer, is an error from New.
	Selectors []Selector
	// KeyFunc derives the key; nil means m.Key.
	KeyFunc KeyFunc
	// MissingKey is the policy for a delivery without a key.
	MissingKey MissingKeyPolicy
	// Duplicates is the policy for confirmed duplicates.
	Duplicates DuplicatePolicy
	// OnDuplicate is called under DuplicateHook (and, with any policy, for
	// every confirmed duplicate when non-nil). It must not block long.
	OnDuplicate func(ctx context.Context, m *Message, reason string)
	// MaxAttempts bounds the attempts of a failing delivery before it is
	// dead-lettered; 0 means 5.
	MaxAttempts int
	// Backoff gives Result.RetryAfter for an attempt that failed; nil means
	// exponential from 100 ms, capped at 10 s, with full jitter.
	Backoff func(attempt int) time.Duration
	// InFlightWait bounds how long a duplicate waits for its in-flight
	// original (see MemoryOptions.Wait).
	InFlightWait time.Duration
	// Completed is the size of the completed-key LRU and of the failed
	// attempt counts (see MemoryOptions.Completed).
	Completed int
	// RenewEvery is the claim renewal period (see StoreOptions.RenewEvery).
	RenewEvery time.Duration
	// SettleTimeout bounds confirm/release calls, which run even when the
	// delivery's context is cancelled; 0 means 10 s.
	SettleTimeout time.Duration
	// Clock is the store's clock (see StoreOptions.Clock).
	Clock idempotency.Clock
	// Metrics receives the counters; nil means a new Metrics.
	Metrics *Metrics
	// Logger receives structured logs; nil is silent.
	Logger *slog.Logger
}

// Receiver is the duplicate pipeline shared by every consumer: key →
// selectors (memory, store, extra) → handler → settle → Result. It is safe
// for concurrent use.
type Receiver struct {
	cfg       Config
	memory    *MemorySelector
	store     *StoreSelector
	selectors []Selector
	failures  *lru.Cache[string, int]
	metrics   *Metrics
	log       *slog.Logger
	jitterMu  sync.Mutex
	jitter    *rand.Rand
}

// New returns a Receiver for cfg.
func New(cfg Config) (*Receiver, error) {
	if cfg.MaxAttempts < 0 {
		return nil, fmt.Errorf("%w: negative MaxAttempts %d", ErrConfig, cfg.MaxAttempts)
	}
	if cfg.MaxAttempts == 0 {
		cfg.MaxAttempts = 5
	}
	if cfg.Duplicates > DuplicateHook {
		return nil, fmt.Errorf("%w: unknown duplicate policy %d", ErrConfig, cfg.Duplicates)
	}
	if cfg.Duplicates == DuplicateHook && cfg.OnDuplicate == nil {
		return nil, fmt.Errorf("%w: DuplicateHook without OnDuplicate", ErrConfig)
	}
	if cfg.MissingKey > MissingKeyProcess {
		return nil, fmt.Errorf("%w: unknown missing-key policy %d", ErrConfig, cfg.MissingKey)
	}
	if cfg.SettleTimeout <= 0 {
		cfg.SettleTimeout = 10 * time.Second
	}
	if cfg.Metrics == nil {
		cfg.Metrics = new(Metrics)
	}
	if cfg.Audit != nil && nilcheck.IsNil(cfg.Audit) {
		return nil, fmt.Errorf("%w: Audit is a nil %T", ErrConfig, cfg.Audit)
	}
	if c, ok := cfg.Audit.(*connAuditor); ok && c.a == nil {
		return nil, fmt.Errorf("%w: Audit is ConnAudit of a nil *connaudit.Audit", ErrConfig)
	}
	if cfg.Store != nil && nilcheck.IsNil(cfg.Store) {
		return nil, fmt.Errorf("%w: Store is a nil %T (was an error from opening it ignored?); leave Store unset for no durable store", ErrConfig, cfg.Store)
	}
	if cfg.StoreBatch < 0 || cfg.StoreLinger < 0 {
		return nil, fmt.Errorf("%w: negative StoreBatch %d or StoreLinger %v", ErrConfig, cfg.StoreBatch, cfg.StoreLinger)
	}
	for i, s := range cfg.Selectors {
		if nilcheck.IsNil(s) {
			return nil, fmt.Errorf("%w: selector %d is nil (%T; was an error from building it ignored?)", ErrConfig, i, s)
		}
	}
	// The audit reports churn through the receiver's logger and its
	// counters through the receiver's Metrics.
	bindAuditor(cfg.Audit, cfg.Logger, cfg.Metrics)
	r := &Receiver{cfg: cfg, metrics: cfg.Metrics, log: orDiscard(cfg.Logger),
		jitter: rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 0x9e3779b97f4a7c15))}
	mem, err := NewMemorySelector(MemoryOptions{Audit: cfg.Audit, Durable: cfg.Store != nil || len(cfg.Selectors) > 0,
		Wait: cfg.InFlightWait, Completed: cfg.Completed, Metrics: cfg.Metrics, Logger: cfg.Logger})
	if err != nil {
		return nil, err
	}
	r.memory = mem
	r.selectors = append(r.selectors, mem)
	if cfg.Store != nil {
		st, err := NewStoreSelector(groupStore(cfg), StoreOptions{Namespace: cfg.Namespace, RenewEvery: cfg.RenewEvery,
			Clock: cfg.Clock, Metrics: cfg.Metrics, Logger: cfg.Logger})
		if err != nil {
			return nil, err
		}
		r.store = st
		r.selectors = append(r.selectors, st)
	}
	r.selectors = append(r.selectors, cfg.Selectors...)
	size := cfg.Completed
	if size == 0 {
		size = DefaultCompleted
	}
	if r.failures, err = lru.New[string, int](size); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrConfig, err)
	}
	return r, nil
}

// groupStore returns cfg.Store wrapped in idempotency.Group as
// cfg.StoreBatch and cfg.StoreLinger say. The Group is never closed: it
// holds no goroutine while idle, and closing is the store owner's call on
// cfg.Store.
func groupStore(cfg Config) idempotency.Store {
	if _, ok := cfg.Store.(*idempotency.Memory); ok && cfg.StoreBatch == 0 {
		return cfg.Store
	}
	return idempotency.Group(cfg.Store, idempotency.GroupOptions{MaxBatch: cfg.StoreBatch, Linger: cfg.StoreLinger,
		Timeout: cfg.SettleTimeout})
}

// Metrics returns the receiver's counters.
func (r *Receiver) Metrics() *Metrics { return r.metrics }

// Memory returns the receiver's memory selector (its in-flight/outcome
// table), for inspection.
func (r *Receiver) Memory() *MemorySelector { return r.memory }

// Selectors returns the selector chain in the order Process runs it.
func (r *Receiver) Selectors() []Selector { return append([]Selector(nil), r.selectors...) }

// Forget rolls back the audit bit of a delivery that will come back without
// having run (a prefetched delivery lost with its connection), unless the
// receiver knows the key as in flight or completed. It reports whether a
// bit was rolled back.
func (r *Receiver) Forget(m *Message) bool {
	if r.cfg.KeyFunc != nil && m.key == "" {
		if k, err := r.cfg.KeyFunc(m); err == nil {
			m.key = k
		}
	}
	if m.IdempotencyKey() == "" {
		return false
	}
	ok := r.memory.Forget(m)
	if ok {
		r.metrics.inc(&r.metrics.Forgotten)
	}
	return ok
}

// Process runs the pipeline for one delivery and tells the transport what
// to do:
//
//  1. Key: cfg.KeyFunc or m.Key; none → cfg.MissingKey policy.
//  2. Selectors in order (memory: in-flight/outcome table and connection
//     audit; store: try-claim; extra selectors). Reject → duplicate policy
//     (no later selector asked: two-tier); Defer → Requeue, never Ack.
//  3. Handler, its panics recovered; store claims renewed from the claim
//     to the settle, other selectors' leases while it runs.
//  4. Success → settle Completed from the last selector to the first (the
//     store confirms before memory records the key as done) → Ack. A failed
//     confirm → settle Failed everywhere (rollback and release) → Requeue.
//     Failure → settle Failed (roll back the audit bit, release the claim)
//     → Requeue while the attempt is below MaxAttempts, else DeadLetter.
//
// The transport acknowledges only on Ack, after Process returns.
func (r *Receiver) Process(ctx context.Context, m *Message, h Handler) Result {
	r.metrics.inc(&r.metrics.Delivered)
	if m.Redelivered {
		r.metrics.inc(&r.metrics.Redelivered)
	}
	key, err := m.Key, error(nil)
	if r.cfg.KeyFunc != nil {
		key, err = r.cfg.KeyFunc(m)
	}
	if key == "" || err != nil {
		return r.missingKey(ctx, m, h, err)
	}
	m.key = key
	fk := tableKey(m)
	attempt := m.Attempt
	if n, ok := r.failures.Get(fk); ok && n+1 > attempt {
		attempt = n + 1
	}
	if attempt < 1 {
		attempt = 1
	}
	m.Attempt = attempt
	res := Result{Attempt: attempt}

	accepted := make([]Decision, 0, len(r.selectors))
	var verdict strings.Builder
	verdict.Grow(48)
	for _, s := range r.selectors {
		d, err := s.Select(ctx, m)
		if verdict.Len() > 0 {
			verdict.WriteByte(' ')
		}
		verdict.WriteString(s.Name())
		verdict.WriteByte(':')
		if err != nil {
			verdict.WriteString("error")
			res.Verdict = verdict.String()
			r.settle(ctx, accepted, Abandoned)
			res.Err = err
			if errors.Is(err, ErrBadKey) {
				return r.deadLetter(m, res, "malformed-key")
			}
			return r.requeue(m, res, s.Name()+"-error")
		}
		verdict.WriteString(d.Detail)
		switch d.Verdict {
		case Accept:
			accepted = append(accepted, d)
			continue
		case Reject:
			res.Verdict = verdict.String()
			if err := r.settle(ctx, accepted, Completed); err != nil {
				r.log.Warn("receiver: recording a duplicate as completed failed", "key", LogKey(key), "err", err)
			}
			return r.duplicate(ctx, m, h, res, d.Reason)
		default: // Defer, or an invalid verdict (treated as Defer: never ack the unknown)
			res.Verdict = verdict.String()
			r.settle(ctx, accepted, Abandoned)
			res.Duplicate = d.Reason == "in-flight"
			if res.Duplicate {
				r.metrics.duplicate("in-flight")
			}
			reason := d.Reason
			if reason == "" {
				reason = s.Name() + "-defer"
			}
			return r.requeue(m, res, reason)
		}
	}
	res.Verdict = verdict.String()

	res.Ran = true
	herr := r.run(ctx, m, h, accepted)
	if herr == nil {
		if err := r.settle(ctx, accepted, Completed); err != nil {
			r.metrics.inc(&r.metrics.SettleErrors)
			res.Err = err
			r.log.Warn("receiver: confirm failed, delivery requeued", "key", LogKey(key), "err", err)
			return r.requeue(m, res, "confirm-error")
		}
		r.failures.Remove(fk)
		r.metrics.inc(&r.metrics.Processed)
		res.Action = Ack
		return res
	}
	r.settle(ctx, accepted, Failed)
	return r.failed(m, res, herr, fk)
}

// failed maps a handler error to Requeue or DeadLetter.
func (r *Receiver) failed(m *Message, res Result, herr error, fk string) Result {
	res.Err = herr
	r.metrics.inc(&r.metrics.HandlerErrors)
	reason := "handler-error"
	if errors.Is(herr, ErrPanic) {
		reason = "panic"
		r.metrics.inc(&r.metrics.Panics)
	}
	if res.Attempt >= r.cfg.MaxAttempts {
		if fk != "" {
			r.failures.Remove(fk)
		}
		return r.deadLetter(m, res, "max-attempts: "+strconv.Itoa(res.Attempt)+" attempts, last "+reason+": "+herr.Error())
	}
	if fk != "" {
		r.failures.Add(fk, res.Attempt)
	}
	if r.log.Enabled(context.Background(), slog.LevelInfo) {
		r.log.Info("receiver: handler failed, delivery requeued", "key", LogKey(m.IdempotencyKey()),
			"attempt", res.Attempt, "err", herr)
	}
	return r.requeue(m, res, reason)
}

func (r *Receiver) requeue(m *Message, res Result, reason string) Result {
	res.Action, res.Reason = Requeue, reason
	res.RetryAfter = r.backoff(res.Attempt)
	r.metrics.inc(&r.metrics.Retries)
	return res
}

func (r *Receiver) deadLetter(m *Message, res Result, reason string) Result {
	res.Action, res.Reason = DeadLetter, reason
	r.metrics.inc(&r.metrics.DeadLettered)
	r.log.Warn("receiver: delivery dead-lettered", "destination", m.Destination, "key", LogKey(m.IdempotencyKey()),
		"reason", reason, "attempt", res.Attempt, "err", res.Err)
	return res
}

func (r *Receiver) backoff(attempt int) time.Duration {
	if r.cfg.Backoff != nil {
		return r.cfg.Backoff(attempt)
	}
	d := 100 * time.Millisecond
	for i := 1; i < attempt && d < 10*time.Second; i++ {
		d *= 2
	}
	d = min(d, 10*time.Second)
	r.jitterMu.Lock()
	j := time.Duration(r.jitter.Int64N(int64(d)) + 1)
	r.jitterMu.Unlock()
	return j
}

// settle settles decisions in reverse order (durable tiers first). On a
// failed Completed settlement it settles that decision and every earlier
// one Failed and returns the error.
func (r *Receiver) settle(ctx context.Context, ds []Decision, st Settlement) error {
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.cfg.SettleTimeout)
	defer cancel()
	for i := len(ds) - 1; i >= 0; i-- {
		if ds[i].Settle == nil {
			continue
		}
		err := ds[i].Settle(sctx, st)
		if err == nil {
			continue
		}
		if st != Completed {
			r.log.Warn("receiver: settlement failed", "settlement", st.String(), "err", err)
			continue
		}
		for j := i; j >= 0; j-- {
			if ds[j].Settle != nil {
				if err := ds[j].Settle(sctx, Failed); err != nil && j == i {
					r.log.Warn("receiver: release after a failed confirm failed", "err", err)
				}
			}
		}
		return err
	}
	return nil
}

// run runs h with panics recovered, in the context the decisions' Context
// hooks derive, renewing leases while it runs. A
// renewal that finds the claim lost cancels the handler's context with
// idempotency.ErrClaimLost as the cause.
func (r *Receiver) run(ctx context.Context, m *Message, h Handler, ds []Decision) error {
	var renewals []Decision
	for _, d := range ds {
		if d.Context != nil {
			ctx = d.Context(ctx)
		}
		if d.Renew != nil && d.RenewEvery > 0 {
			renewals = append(renewals, d)
		}
	}
	if len(renewals) == 0 {
		return call(ctx, m, h)
	}
	hctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for _, d := range renewals {
		wg.Add(1)
		go r.renew(hctx, d, stop, &wg, cancel)
	}
	err := call(hctx, m, h)
	close(stop)
	wg.Wait()
	return err
}

func (r *Receiver) renew(ctx context.Context, d Decision, stop <-chan struct{}, wg *sync.WaitGroup, cancel context.CancelCauseFunc) {
	defer wg.Done()
	t := time.NewTicker(d.RenewEvery)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-ctx.Done():
			return
		case <-t.C:
			if err := d.Renew(ctx); err != nil {
				if errors.Is(err, idempotency.ErrClaimLost) {
					r.log.Warn("receiver: claim lost while the handler ran; cancelling it", "err", err)
					cancel(err)
					return
				}
				r.log.Warn("receiver: claim renewal failed", "err", err)
			}
		}
	}
}

// call runs h, turning a panic into an error wrapping ErrPanic.
func call(ctx context.Context, m *Message, h Handler) (err error) {
	defer func() {
		if v := recover(); v != nil {
			err = fmt.Errorf("%w: %v\n%s", ErrPanic, v, debug.Stack())
		}
	}()
	return h(ctx, m)
}

// duplicate applies the duplicate policy to a confirmed duplicate.
func (r *Receiver) duplicate(ctx context.Context, m *Message, h Handler, res Result, reason string) Result {
	res.Duplicate = true
	res.Reason = reason
	r.metrics.duplicate(reason)
	if r.log.Enabled(ctx, slog.LevelWarn) { // the guard spares the argument boxing when logs are off
		r.log.Warn("receiver: duplicate delivery absorbed", "destination", m.Destination, "key", LogKey(m.IdempotencyKey()),
			"reason", reason, "redelivered", m.Redelivered)
	}
	if r.cfg.OnDuplicate != nil {
		r.hook(ctx, m, reason)
	}
	switch r.cfg.Duplicates {
	case DuplicateDeadLetter:
		return r.deadLetter(m, res, "duplicate:"+reason)
	case DuplicateDeliver:
		m.Duplicate = true
		hd := make(map[string]string, len(m.Headers)+1)
		for k, v := range m.Headers {
			hd[k] = v
		}
		hd[HeaderDuplicate] = "true"
		m.Headers = hd
		res.Ran = true
		if err := call(ctx, m, h); err != nil {
			return r.failed(m, res, err, "")
		}
	}
	res.Action = Ack
	return res
}

func (r *Receiver) hook(ctx context.Context, m *Message, reason string) {
	defer func() {
		if v := recover(); v != nil {
			r.log.Error("receiver: OnDuplicate panicked", "panic", v)
		}
	}()
	r.cfg.OnDuplicate(ctx, m, reason)
}

// missingKey applies the missing-key policy.
func (r *Receiver) missingKey(ctx context.Context, m *Message, h Handler, kerr error) Result {
	r.metrics.inc(&r.metrics.MissingKeys)
	res := Result{Attempt: max(m.Attempt, 1), Verdict: "key:missing"}
	if kerr != nil {
		res.Err = fmt.Errorf("%w: %w", ErrNoKey, kerr)
	} else {
		res.Err = ErrNoKey
	}
	if r.cfg.MissingKey == MissingKeyDeadLetter {
		return r.deadLetter(m, res, "missing-key")
	}
	r.log.Warn("receiver: delivery without a key processed without duplicate detection",
		"destination", m.Destination)
	res.Ran = true
	if err := call(ctx, m, h); err != nil {
		return r.failed(m, res, err, "")
	}
	r.metrics.inc(&r.metrics.Processed)
	res.Action, res.Err = Ack, nil
	return res
}
