package receiver

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/acemq/msgaudit/idempotency"
	"github.com/acemq/msgaudit/internal/admission"
	"github.com/acemq/msgaudit/internal/logkey"
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

// Config configures a Receiver. Durability is an explicit choice: set
// Store, Inbox or Selectors, or MemoryOnly; the zero Config is an error
// from New.
type Config struct {
	// Audit is the connection audit (ConnAudit wraps *connaudit.Audit). It
	// is owned by the Receiver, not by a connection, so it survives
	// reconnects. nil: the memory tier tracks keys in its table only.
	Audit Auditor
	// Store is the durable tier: an idempotency store that remembers
	// finished work across restarts and consumers. A crash between the
	// handler's effect and the store's confirm leaves the claim open, and
	// once its lease lapses the redelivery runs the handler again; for
	// effects in a SQL database use Inbox instead. A non-nil interface
	// holding a nil pointer (a store whose Open error went unchecked) is
	// an error from New.
	Store idempotency.Store
	// Inbox is the transactional inbox (an *inbox.Inbox or a
	// *pgxinbox.Inbox): it records each delivery's key in the handler's
	// own database transaction, so effect and key commit together, and
	// the handler gets that transaction through inbox.Handler
	// (pgxinbox.Handler). It runs after the memory tier, in place of
	// Store: setting both is an error, and so are Duplicates
	// DuplicateDeliver and MissingKey MissingKeyProcess (both would run
	// the handler without the transaction). New sizes the inbox's lanes
	// (transactions open at once, each running its deliveries one after
	// the other; on PostgreSQL, unless the inbox's Options.Lanes is set)
	// to Handlers (at most LaneBound), and refuses more lanes than that or
	// a database pool with fewer connections than lanes (each lane holds
	// one). The inbox scopes its keys by its own Options.Namespace, not by
	// Namespace.
	Inbox Inbox
	// MemoryOnly runs the receiver without a durable tier, on purpose:
	// duplicates are absorbed only while this process runs (the connection
	// audit and the in-flight table survive reconnects); after a restart,
	// or on another consumer of the same queue, a redelivery of work
	// already done is applied again. Setting it with Store or Inbox is an
	// error.
	MemoryOnly bool
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
	// Namespace is the store namespace; "" means the message's
	// destination (so consumers of one queue share their keys). Topic
	// deliveries append "#" and the consumer (each subscriber's copy is
	// its own unit of work), with '%' and '#' in the consumer written
	// "%25" and "%23" so that two different pairs never share a namespace.
	Namespace string
	// Selectors are extra selectors run after the store (for example a
	// metadata-store selector); they count as durable tiers. A nil entry,
	// or one holding a nil pointer, is an error from New.
	Selectors []Selector
	// KeyFunc derives the key; nil means m.Key.
	KeyFunc KeyFunc
	// MissingKey is the policy for a delivery without a key (default:
	// dead-letter with reason "missing-key").
	MissingKey MissingKeyPolicy
	// Duplicates is the policy for confirmed duplicates (default:
	// acknowledge and drop).
	Duplicates DuplicatePolicy
	// OnDuplicate is called under DuplicateHook (and, with any policy, for
	// every confirmed duplicate when non-nil). It must not block long.
	OnDuplicate func(ctx context.Context, m *Message, reason string)
	// MaxAttempts bounds the attempts of a failing delivery before it is
	// dead-lettered; 0 means 5.
	MaxAttempts int
	// Backoff gives Result.RetryAfter for an attempt that failed: attempt
	// n waits Backoff.Delay(n-1). Its zero fields mean 100 ms doubling to
	// 10 s, with full jitter.
	Backoff Backoff
	// InFlightWait bounds how long a duplicate waits for its in-flight
	// original before it is requeued: 0 means 10 s, a negative value means
	// do not wait (requeue at once).
	InFlightWait time.Duration
	// Completed is the number of completed keys the memory tier
	// remembers (an LRU), and of failed attempt counts; 0 means 65536, a
	// negative value is an error from New.
	Completed int
	// RenewEvery is the store claim's renewal period; 0 means half the
	// claim's remaining lease, a negative value disables renewal.
	RenewEvery time.Duration
	// SettleTimeout bounds confirm/release calls, which run even when the
	// delivery's context is cancelled; 0 means 10 s.
	SettleTimeout time.Duration
	// Clock is the clock the store keeps time with (for the renewal
	// period) and the clock of a ConnAudit adapter's rate limit of
	// producer-churn warnings; nil means the wall clock.
	Clock idempotency.Clock
	// Handlers bounds how many handlers run at once across every Process
	// call; 0 means no bound, a negative value is an error from New.
	// Process may then hold more deliveries than Handlers: each waits for
	// a slot after its selectors accepted (its claim made and renewed) and
	// gives the slot back when its handler returns, before its confirm, so
	// that claims and confirms of many deliveries can be grouped.
	// Duplicates handed to the handler (DuplicateDeliver) and deliveries
	// without a key run under MissingKeyProcess take a slot too.
	Handlers int
	// LaneBound, when positive, is the most inbox lanes the handlers can
	// take below Handlers: a transport sets it when some deliveries may
	// hold lanes while they wait for handlers of their own group (a STOMP
	// subscription that holds more deliveries than its Concurrency), so
	// that a delivery holding a lane always finds a handler. 0 means
	// Handlers.
	LaneBound int
	// Metrics receives the counters; nil means a new Metrics.
	Metrics *Metrics
	// Logger receives structured logs (and a ConnAudit adapter's
	// producer-churn warnings); nil is silent.
	Logger *slog.Logger
	// Observer, when non-nil, observes every delivery Process runs: its
	// start, each selector's decision, the handler, the settlement and
	// the Result (package oteltrace traces them with OpenTelemetry). A
	// non-nil interface holding a nil pointer is an error from New.
	Observer Observer
	// SlowAfter, when positive, logs a delivery still inside Process (its
	// handler running, or waiting for a handler or its settlement) after
	// SlowAfter, once, at warn level with its key, while it is still
	// running. Zero logs nothing: the check costs a timer per delivery.
	// Metrics' OldestInFlight shows the same without a threshold.
	SlowAfter time.Duration
}

// Inbox is a transactional inbox as Config.Inbox takes it: a Selector
// whose lanes (database transactions open at once) New sizes and checks
// against the handlers and the database pool. *inbox.Inbox and
// *pgxinbox.Inbox implement it.
type Inbox interface {
	Selector
	// SizeLanes sets the number of lanes to handlers when the inbox's
	// options left it open, and returns the number in effect.
	SizeLanes(handlers int) int
	// MaxOpenConns returns the database pool's connection limit (0 =
	// unlimited).
	MaxOpenConns() int
}

// Receiver is the duplicate pipeline shared by every consumer: key →
// selectors (memory, store or inbox, extra) → handler → settle → Result.
// It is safe for concurrent use.
type Receiver struct {
	cfg       Config
	memory    *memorySelector
	selectors []Selector
	failures  *lru.Cache[string, int]
	metrics   *Metrics
	gate      *admission.Gate
	log       *slog.Logger
}

// New checks cfg and returns a Receiver for it. Every invalid
// configuration is an error wrapping ErrConfig, returned here and never at
// the first message.
func New(cfg Config) (*Receiver, error) {
	cfg, err := checkConfig(cfg)
	if err != nil {
		return nil, err
	}
	// The audit reports churn through the receiver's logger and clock, and
	// its counters through the receiver's Metrics.
	bindAuditor(cfg.Audit, cfg.Logger, cfg.Clock, cfg.Metrics)
	r := &Receiver{cfg: cfg, metrics: cfg.Metrics, gate: admission.New(cfg.Handlers), log: orDiscard(cfg.Logger)}
	durable := cfg.Store != nil || cfg.Inbox != nil || len(cfg.Selectors) > 0
	mem, err := newMemorySelector(memoryOptions{Audit: cfg.Audit, Durable: durable,
		Wait: cfg.InFlightWait, Completed: cfg.Completed, Metrics: cfg.Metrics, Logger: cfg.Logger})
	if err != nil {
		return nil, err
	}
	r.memory = mem
	r.selectors = append(r.selectors, mem)
	if cfg.Store != nil {
		gs, err := groupStore(cfg)
		if err != nil {
			return nil, err
		}
		st, err := newStoreSelector(gs, storeOptions{Namespace: cfg.Namespace, RenewEvery: cfg.RenewEvery,
			Clock: cfg.Clock, Metrics: cfg.Metrics, Logger: cfg.Logger})
		if err != nil {
			return nil, err
		}
		r.selectors = append(r.selectors, st)
	}
	if cfg.Inbox != nil {
		r.selectors = append(r.selectors, cfg.Inbox)
	}
	r.selectors = append(r.selectors, cfg.Selectors...)
	size := cfg.Completed
	if size == 0 {
		size = defaultCompleted
	}
	if r.failures, err = lru.New[string, int](size); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrConfig, err)
	}
	return r, nil
}

// checkConfig refuses an invalid cfg and fills in its defaults.
func checkConfig(cfg Config) (Config, error) {
	if cfg.MaxAttempts < 0 {
		return cfg, fmt.Errorf("%w: negative MaxAttempts %d", ErrConfig, cfg.MaxAttempts)
	}
	if cfg.MaxAttempts == 0 {
		cfg.MaxAttempts = 5
	}
	if cfg.Duplicates > DuplicateHook {
		return cfg, fmt.Errorf("%w: unknown duplicate policy %d", ErrConfig, cfg.Duplicates)
	}
	if cfg.Duplicates == DuplicateHook && cfg.OnDuplicate == nil {
		return cfg, fmt.Errorf("%w: DuplicateHook without OnDuplicate", ErrConfig)
	}
	if cfg.MissingKey > MissingKeyProcess {
		return cfg, fmt.Errorf("%w: unknown missing-key policy %d", ErrConfig, cfg.MissingKey)
	}
	if cfg.Handlers < 0 || cfg.LaneBound < 0 {
		return cfg, fmt.Errorf("%w: negative Handlers %d or LaneBound %d", ErrConfig, cfg.Handlers, cfg.LaneBound)
	}
	if cfg.Completed < 0 {
		return cfg, fmt.Errorf("%w: negative Completed %d", ErrConfig, cfg.Completed)
	}
	if cfg.SettleTimeout <= 0 {
		cfg.SettleTimeout = 10 * time.Second
	}
	if cfg.Metrics == nil {
		cfg.Metrics = new(Metrics)
	}
	cfg.Backoff = cfg.Backoff.withDefaults(100*time.Millisecond, 10*time.Second, 1)
	if cfg.Audit != nil && nilcheck.IsNil(cfg.Audit) {
		return cfg, fmt.Errorf("%w: Audit is a nil %T", ErrConfig, cfg.Audit)
	}
	if c, ok := cfg.Audit.(*connAuditor); ok && c.a == nil {
		return cfg, fmt.Errorf("%w: Audit is ConnAudit of a nil *connaudit.Audit", ErrConfig)
	}
	if cfg.SlowAfter < 0 {
		return cfg, fmt.Errorf("%w: negative SlowAfter %v", ErrConfig, cfg.SlowAfter)
	}
	if cfg.StoreBatch < 0 || cfg.StoreLinger < 0 {
		return cfg, fmt.Errorf("%w: negative StoreBatch %d or StoreLinger %v", ErrConfig, cfg.StoreBatch, cfg.StoreLinger)
	}
	if cfg.Observer != nil && nilcheck.IsNil(cfg.Observer) {
		return cfg, fmt.Errorf("%w: Observer is a nil %T", ErrConfig, cfg.Observer)
	}
	for i, s := range cfg.Selectors {
		if nilcheck.IsNil(s) {
			return cfg, fmt.Errorf("%w: selector %d is nil (%T; was an error from building it ignored?)", ErrConfig, i, s)
		}
	}
	if err := checkDurability(cfg); err != nil {
		return cfg, err
	}
	if cfg.Inbox != nil {
		if err := checkInbox(cfg); err != nil {
			return cfg, err
		}
	}
	return cfg, nil
}

// checkDurability makes durability an explicit choice: a usable store, an
// inbox or selectors, or MemoryOnly.
func checkDurability(cfg Config) error {
	switch {
	case cfg.Store != nil && nilcheck.IsNil(cfg.Store):
		return fmt.Errorf("%w: Store is a nil %T (was an error from opening it ignored?); leave Store unset for no durable store", ErrConfig, cfg.Store)
	case cfg.Inbox != nil && nilcheck.IsNil(cfg.Inbox):
		return fmt.Errorf("%w: Inbox is a nil %T (was an error from opening it ignored?)", ErrConfig, cfg.Inbox)
	case cfg.Store != nil && cfg.Inbox != nil:
		return fmt.Errorf("%w: Inbox and Store both set: the inbox records keys in the handler's transaction, while a store claims and confirms outside it, and a crash between effect and confirm would leave the store's claim open; use one", ErrConfig)
	case cfg.MemoryOnly && (cfg.Store != nil || cfg.Inbox != nil):
		return fmt.Errorf("%w: MemoryOnly set together with a Store or an Inbox; use one", ErrConfig)
	case !cfg.MemoryOnly && cfg.Store == nil && cfg.Inbox == nil && len(cfg.Selectors) == 0:
		return fmt.Errorf("%w: no Store, Inbox or Selectors: set Inbox to a transactional inbox (package inbox) so that a message whose effect is in a database is never applied twice, Store to an idempotency store (idempotency.Open) to recognise finished work across restarts and consumers, or MemoryOnly: true to detect duplicates within this process only", ErrConfig)
	}
	return nil
}

// checkInbox refuses configurations that would defeat the transactional
// inbox, sizes its lanes to the handlers (at most LaneBound) when its
// options left them open, and refuses more lanes than that (a delivery
// holding a lane, and with it the uncommitted work of its batch, could
// wait for a handler slot held by a handler waiting for that work's
// locks) or than the pool's connections (each lane holds one).
func checkInbox(cfg Config) error {
	switch {
	case cfg.Duplicates == DuplicateDeliver:
		return fmt.Errorf("%w: Inbox with DuplicateDeliver: a duplicate would reach the handler without the inbox's transaction; use another duplicate policy", ErrConfig)
	case cfg.MissingKey == MissingKeyProcess:
		return fmt.Errorf("%w: Inbox with MissingKeyProcess: a delivery without a key would reach the handler without the inbox's transaction; dead-letter it instead", ErrConfig)
	}
	limit := cfg.Handlers
	if cfg.LaneBound > 0 && (limit == 0 || cfg.LaneBound < limit) {
		limit = cfg.LaneBound
	}
	lanes := cfg.Inbox.SizeLanes(limit)
	if limit > 0 && lanes > limit {
		return fmt.Errorf("%w: the inbox has %d lanes but %d handlers can take them (Handlers; a STOMP subscription's Concurrency bounds its own); a delivery holding a lane must always find a handler: set the inbox's Options.Lanes to at most %d", ErrConfig, lanes, limit, limit)
	}
	if n := cfg.Inbox.MaxOpenConns(); n > 0 && n < lanes {
		return fmt.Errorf("%w: the inbox's database pool allows %d connections but the inbox has %d lanes, and each holds a connection for its open transaction; raise the pool's limit or lower the handlers (or the inbox's Options.Lanes)", ErrConfig, n, lanes)
	}
	return nil
}

// groupStore returns cfg.Store wrapped in idempotency.Group as
// cfg.StoreBatch and cfg.StoreLinger say. The Group is never closed: it
// holds no goroutine while idle, and closing is the store owner's call on
// cfg.Store. Options Group refuses are an error wrapping ErrConfig.
func groupStore(cfg Config) (idempotency.Store, error) {
	if _, ok := cfg.Store.(*idempotency.Memory); ok && cfg.StoreBatch == 0 {
		return cfg.Store, nil
	}
	s, err := idempotency.Group(cfg.Store, idempotency.GroupOptions{MaxBatch: cfg.StoreBatch, Linger: cfg.StoreLinger,
		Timeout: cfg.SettleTimeout})
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrConfig, err)
	}
	return s, nil
}

// Metrics returns the receiver's counters.
func (r *Receiver) Metrics() *Metrics { return r.metrics }

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
//  3. Handler, its panics recovered, once a slot of the Handlers gate (and
//     of a transport's gate on ctx) is free; store claims renewed
//     from the claim to the settle, other selectors' leases while it waits
//     for the slot and runs. A delivery abandoned before its handler
//     started (its context ended, or the transport abandoned it) settles Abandoned and returns Requeue
//     with Ran false.
//  4. Success → settle Completed from the last selector to the first (the
//     store confirms before memory records the key as done) → Ack. A failed
//     confirm → settle Failed everywhere (rollback and release) → Requeue.
//     Failure → settle Failed (roll back the audit bit, release the claim)
//     → Requeue while the attempt is below MaxAttempts, else DeadLetter.
//
// Config.Observer, when set, sees each of these steps.
//
// The transport acknowledges only on Ack, after Process returns.
func (r *Receiver) Process(ctx context.Context, m *Message, h Handler) Result {
	now := time.Now()
	if r.metrics != nil {
		defer r.metrics.inflight.end(r.metrics.inflight.begin(now))
	}
	if r.cfg.SlowAfter > 0 {
		dest, key := m.Destination, m.Key // process changes m as it goes
		defer time.AfterFunc(r.cfg.SlowAfter, func() { r.logSlow(dest, key, now) }).Stop()
	}
	if r.cfg.Observer == nil {
		return r.process(ctx, m, h, nil)
	}
	ctx, obs := r.cfg.Observer.Start(ctx, m)
	res := r.process(ctx, m, h, obs)
	if obs != nil {
		obs.End(res)
	}
	return res
}

// logSlow logs, once, a delivery to dest with the transport's key (its
// Message.Key) that entered Process at start and is still there after
// Config.SlowAfter.
func (r *Receiver) logSlow(dest, key string, start time.Time) {
	r.log.Warn("receiver: delivery still in progress", "destination", logKey(dest), "key", logKey(key),
		"running", time.Since(start).Round(time.Millisecond), "slow_after", r.cfg.SlowAfter)
}

// process is Process, reporting to obs when it is not nil.
func (r *Receiver) process(ctx context.Context, m *Message, h Handler, obs Observation) Result {
	r.metrics.inc(&r.metrics.Delivered)
	if m.Redelivered {
		r.metrics.inc(&r.metrics.Redelivered)
	}
	key, err := m.Key, error(nil)
	if r.cfg.KeyFunc != nil {
		key, err = r.cfg.KeyFunc(m)
	}
	if key == "" || err != nil {
		return r.missingKey(ctx, m, h, err, obs)
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
	var trace strings.Builder
	trace.Grow(48)
	for _, s := range r.selectors {
		d, err := s.Select(ctx, m)
		if obs != nil {
			obs.Selected(s.Name(), d, err)
		}
		if trace.Len() > 0 {
			trace.WriteByte(' ')
		}
		trace.WriteString(s.Name())
		trace.WriteByte(':')
		if err != nil {
			trace.WriteString("error")
			res.Trace = trace.String()
			r.settle(ctx, accepted, Abandoned, obs)
			res.Err = err
			if errors.Is(err, ErrBadKey) {
				return r.deadLetter(m, res, "malformed-key")
			}
			return r.requeue(m, res, s.Name()+"-error")
		}
		trace.WriteString(d.Detail)
		switch d.Verdict {
		case Accept:
			accepted = append(accepted, d)
			continue
		case Reject:
			res.Trace = trace.String()
			if err := r.settle(ctx, accepted, Completed, obs); err != nil {
				r.log.Warn("receiver: recording a duplicate as completed failed", "key", logKey(key), "err", err)
			}
			return r.duplicate(ctx, m, h, res, d.Reason, obs)
		default: // Defer, or an invalid verdict (treated as Defer: never ack the unknown)
			res.Trace = trace.String()
			r.settle(ctx, accepted, Abandoned, obs)
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
	res.Trace = trace.String()

	started, herr := r.run(ctx, m, h, accepted, obs)
	if !started {
		r.settle(ctx, accepted, Abandoned, obs)
		return abandoned(res, herr)
	}
	res.Ran = true
	if herr == nil {
		if err := r.settle(ctx, accepted, Completed, obs); err != nil {
			r.metrics.inc(&r.metrics.SettleErrors)
			res.Err = err
			r.log.Warn("receiver: confirm failed, delivery requeued", "key", logKey(key), "err", err)
			return r.requeue(m, res, "confirm-error")
		}
		r.failures.Remove(fk)
		r.metrics.inc(&r.metrics.Processed)
		res.Action = Ack
		return res
	}
	r.settle(ctx, accepted, Failed, obs)
	return r.failed(m, res, herr, fk)
}

// abandoned is the Result of a delivery whose handler never started: no
// attempt, no backoff, nothing for the transport to send.
func abandoned(res Result, err error) Result {
	res.Action, res.Reason, res.Err, res.Ran = Requeue, "abandoned", err, false
	return res
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
		r.log.Info("receiver: handler failed, delivery requeued", "key", logKey(m.IdempotencyKey()),
			"attempt", res.Attempt, "err", logkey.Error(herr))
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
	r.log.Warn("receiver: delivery dead-lettered", "destination", logKey(m.Destination), "key", logKey(m.IdempotencyKey()),
		"reason", logKey(reason), "attempt", res.Attempt, "err", logkey.Error(res.Err))
	return res
}

func (r *Receiver) backoff(attempt int) time.Duration {
	return r.cfg.Backoff.Delay(attempt - 1)
}

// settle settles decisions in reverse order (durable tiers first). On a
// failed Completed settlement it settles that decision and every earlier
// one Failed and returns the error. obs, when not nil, sees a settlement
// that has something to settle, and its first error.
func (r *Receiver) settle(ctx context.Context, ds []Decision, st Settlement, obs Observation) (err error) {
	if obs != nil && slices.ContainsFunc(ds, func(d Decision) bool { return d.Settle != nil }) {
		var done func(error)
		ctx, done = obs.Settle(ctx, st)
		var first error
		defer func() {
			if err != nil {
				first = err
			}
			done(first)
		}()
		return r.settleAll(ctx, ds, st, &first)
	}
	return r.settleAll(ctx, ds, st, nil)
}

// settleAll is settle; a failed Failed or Abandoned settlement, logged and
// passed over, is stored in *first when first is not nil and holds none yet.
func (r *Receiver) settleAll(ctx context.Context, ds []Decision, st Settlement, first *error) error {
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
			if first != nil && *first == nil {
				*first = err
			}
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
// hooks derive, once admitted by the gates, renewing leases while it waits
// and runs. A renewal that finds the claim lost cancels the handler's
// context with idempotency.ErrClaimLost as the cause. started is false
// (and err wraps ErrAbandoned) when h never ran.
func (r *Receiver) run(ctx context.Context, m *Message, h Handler, ds []Decision, obs Observation) (started bool, err error) {
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
		return r.gated(ctx, m, h, obs)
	}
	hctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for _, d := range renewals {
		wg.Add(1)
		go r.renew(hctx, d, stop, &wg, cancel)
	}
	started, err = r.gated(hctx, m, h, obs)
	close(stop)
	wg.Wait()
	return started, err
}

// gated calls h once admitted by the gates, and gives the slots back when
// it returns; started is false when it was abandoned instead. obs, when
// not nil, sees the handler run.
func (r *Receiver) gated(ctx context.Context, m *Message, h Handler, obs Observation) (started bool, err error) {
	g, err := r.admit(ctx)
	if err != nil {
		return false, err
	}
	if obs == nil {
		err = call(ctx, m, h)
	} else {
		hctx, done := obs.Handle(ctx)
		err = call(hctx, m, h)
		done(err)
	}
	r.leave(g)
	return true, err
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
func (r *Receiver) duplicate(ctx context.Context, m *Message, h Handler, res Result, reason string, obs Observation) Result {
	res.Duplicate = true
	res.Reason = reason
	r.metrics.duplicate(reason)
	if r.log.Enabled(ctx, slog.LevelWarn) { // the guard spares the argument boxing when logs are off
		r.log.Warn("receiver: duplicate delivery absorbed", "destination", logKey(m.Destination), "key", logKey(m.IdempotencyKey()),
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
		hd[headerDuplicate] = "true"
		m.Headers = hd
		started, err := r.gated(ctx, m, h, obs)
		if !started {
			return abandoned(res, err)
		}
		res.Ran = true
		if err != nil {
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
func (r *Receiver) missingKey(ctx context.Context, m *Message, h Handler, kerr error, obs Observation) Result {
	r.metrics.inc(&r.metrics.MissingKeys)
	res := Result{Attempt: max(m.Attempt, 1), Trace: "key:missing"}
	if kerr != nil {
		res.Err = fmt.Errorf("%w: %w", ErrNoKey, kerr)
	} else {
		res.Err = ErrNoKey
	}
	if r.cfg.MissingKey == MissingKeyDeadLetter {
		return r.deadLetter(m, res, "missing-key")
	}
	r.log.Warn("receiver: delivery without a key processed without duplicate detection",
		"destination", logKey(m.Destination))
	started, err := r.gated(ctx, m, h, obs)
	if !started {
		return abandoned(res, err)
	}
	res.Ran = true
	if err != nil {
		return r.failed(m, res, err, "")
	}
	r.metrics.inc(&r.metrics.Processed)
	res.Action, res.Err = Ack, nil
	return res
}
