package idempotency

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// DefaultGroupMaxBatch is the largest batch Group sends when
// GroupOptions.MaxBatch is zero.
const DefaultGroupMaxBatch = 128

// defaultGroupTimeout bounds each batch call when GroupOptions.Timeout is
// zero.
const defaultGroupTimeout = 10 * time.Second

// GroupOptions configure Group. The zero value means every default.
type GroupOptions struct {
	// MaxBatch is the largest number of requests of one kind sent in one
	// batch call; a batch is sent as soon as it is this large. Zero means
	// DefaultGroupMaxBatch; 1 means no grouping (Group returns the store
	// unchanged).
	MaxBatch int
	// Linger is how long a batch may wait for company: the first request
	// of a batch is sent at most Linger after it arrived (sooner when the
	// batch fills up). Zero, the default, means no waiting: a batch is
	// sent as soon as the previous batch of its kind has returned, so
	// batches form only from requests that arrive while a batch call is in
	// flight, and a lone request on an idle store is sent at once.
	Linger time.Duration
	// Timeout bounds each batch call, which runs under a context no single
	// caller can cancel (the first request's context without its
	// cancellation, so its values reach the backend). Zero means 10
	// seconds.
	Timeout time.Duration
}

// validate reports a negative MaxBatch, Linger or Timeout as ErrOptions.
func (o GroupOptions) validate() error {
	switch {
	case o.MaxBatch < 0:
		return fmt.Errorf("%w: negative MaxBatch %d", ErrOptions, o.MaxBatch)
	case o.Linger < 0:
		return fmt.Errorf("%w: negative Linger %v", ErrOptions, o.Linger)
	case o.Timeout < 0:
		return fmt.Errorf("%w: negative Timeout %v", ErrOptions, o.Timeout)
	}
	return nil
}

// Group returns a Store that coalesces the TryClaim, Confirm and Release
// calls of concurrent goroutines into TryClaimBatch, ConfirmBatch and
// ReleaseBatch calls on s, when s is a BatchStore; otherwise, or when
// o.MaxBatch is 1, it returns s unchanged. Invalid options (a negative
// MaxBatch, Linger or Timeout) are an error wrapping ErrOptions.
//
// Each kind of call has its own queue and at most one batch call in
// flight: requests that arrive while a batch call runs form the next
// batch, of at most MaxBatch requests, sent when the previous one has
// returned (after Linger, when set). A flusher goroutine runs only while
// requests are queued or in flight, so an idle Group holds no goroutine
// and needs no Close to release one. Renew and IsConfirmed go straight
// to s. Close stops accepting calls (they return ErrClosed), waits until
// every queued request is answered, then closes s.
//
// A caller whose context ends while its request waits gets the context's
// error at once. The batch call itself is not cancelled (it serves other
// callers too), so the request may still take effect: a claim answered
// Claimed after its caller left is released by the Group (best effort; if
// the release fails, the claim lapses after its TTL), while a Confirm or
// Release whose caller left may have been applied. This is what a
// cancelled single call on a remote store can do too: the caller must
// treat the outcome as unknown (the receiver requeues, and the redelivery
// finds the key confirmed or free).
//
// Every per-key answer is what the single-key call would have answered;
// an error failing a whole batch is returned to every caller in it.
func Group(s Store, o GroupOptions) (Store, error) {
	if err := o.validate(); err != nil {
		return nil, err
	}
	bs, ok := s.(BatchStore)
	if !ok || o.MaxBatch == 1 {
		return s, nil
	}
	if o.MaxBatch == 0 {
		o.MaxBatch = DefaultGroupMaxBatch
	}
	if o.Timeout == 0 {
		o.Timeout = defaultGroupTimeout
	}
	g := &groupStore{s: bs, o: o}
	g.pool.New = func() any { return &groupReq{done: make(chan struct{}, 1)} }
	for i, b := range g.batchers() {
		b.g, b.kind = g, groupOp(i)
		b.runFunc = b.run // made once: "go b.run()" would allocate a closure per start
		b.wake = make(chan struct{}, 1)
		b.timer = time.NewTimer(time.Hour)
		b.timer.Stop()
	}
	return g, nil
}

// groupOp is the kind of request a batcher sends.
type groupOp uint8

const (
	opClaim groupOp = iota
	opConfirm
	opRelease
)

// Request states: waiting for the reply, answered (the caller reads the
// reply), abandoned (the caller left; the flusher disposes of the reply).
const (
	reqWaiting uint32 = iota
	reqReplied
	reqAbandoned
)

// groupReq is one caller's request and its reply. Requests are pooled:
// the caller owns one until it is queued, the flusher until it replies,
// and the caller again after reading the reply (it returns it to the
// pool). An abandoned request is returned to the pool by the flusher.
type groupReq struct {
	ctx   context.Context
	key   Key   // opClaim
	claim Claim // opConfirm, opRelease
	at    time.Time
	out   Outcome
	res   Claim
	err   error
	state atomic.Uint32
	done  chan struct{} // capacity 1: the flusher's reply signal
}

// groupStore is the Store Group returns.
type groupStore struct {
	s         BatchStore
	o         GroupOptions
	pool      sync.Pool
	claims    batcher
	confirms  batcher
	releases  batcher
	flushers  sync.WaitGroup
	closeOnce sync.Once
	closeErr  error
}

func (g *groupStore) batchers() [3]*batcher {
	return [3]*batcher{&g.claims, &g.confirms, &g.releases}
}

func (g *groupStore) get(ctx context.Context) *groupReq {
	r := g.pool.Get().(*groupReq)
	r.ctx = ctx
	return r
}

func (g *groupStore) put(r *groupReq) {
	r.ctx, r.key, r.claim, r.res, r.err, r.out, r.at = nil, Key{}, Claim{}, Claim{}, nil, 0, time.Time{}
	r.state.Store(reqWaiting)
	g.pool.Put(r)
}

// wait waits for r's reply. It returns nil when the reply is there for the
// caller to read, or ctx's error when ctx ended first; r then belongs to
// the flusher.
func (g *groupStore) wait(ctx context.Context, r *groupReq) error {
	select {
	case <-r.done:
		return nil
	case <-ctx.Done():
		if r.state.CompareAndSwap(reqWaiting, reqAbandoned) {
			return ctx.Err()
		}
		<-r.done // the reply raced the cancellation and won: it is the caller's
		return nil
	}
}

// TryClaim queues a try-claim of key and waits for its batch.
func (g *groupStore) TryClaim(ctx context.Context, key Key) (Outcome, Claim, error) {
	if err := ctx.Err(); err != nil {
		return 0, Claim{}, err
	}
	r := g.get(ctx)
	r.key = key
	if err := g.claims.enqueue(r); err != nil {
		g.put(r)
		return 0, Claim{}, err
	}
	if err := g.wait(ctx, r); err != nil {
		return 0, Claim{}, err
	}
	out, c, err := r.out, r.res, r.err
	g.put(r)
	return out, c, err
}

// Confirm queues a confirm of c and waits for its batch.
func (g *groupStore) Confirm(ctx context.Context, c Claim) error {
	return g.settle(ctx, &g.confirms, c)
}

// Release queues a release of c and waits for its batch.
func (g *groupStore) Release(ctx context.Context, c Claim) error {
	return g.settle(ctx, &g.releases, c)
}

func (g *groupStore) settle(ctx context.Context, b *batcher, c Claim) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	r := g.get(ctx)
	r.claim = c
	if err := b.enqueue(r); err != nil {
		g.put(r)
		return err
	}
	if err := g.wait(ctx, r); err != nil {
		return err
	}
	err := r.err
	g.put(r)
	return err
}

// Renew renews c on the underlying store.
func (g *groupStore) Renew(ctx context.Context, c Claim) (Claim, error) { return g.s.Renew(ctx, c) }

// IsConfirmed asks the underlying store.
func (g *groupStore) IsConfirmed(ctx context.Context, key Key) (bool, error) {
	return g.s.IsConfirmed(ctx, key)
}

// Close refuses new calls, waits until every queued request has been
// answered, then closes the underlying store. Later calls return the
// first call's result.
func (g *groupStore) Close() error {
	g.closeOnce.Do(func() {
		for _, b := range g.batchers() {
			b.mu.Lock()
			b.closed = true
			select {
			case b.wake <- struct{}{}: // a lingering flusher sends at once
			default:
			}
			b.mu.Unlock()
		}
		g.flushers.Wait()
		g.closeErr = g.s.Close()
	})
	return g.closeErr
}

// batcher queues the requests of one kind and runs their flusher.
type batcher struct {
	g    *groupStore
	kind groupOp

	mu      sync.Mutex
	queue   []*groupReq
	running bool // a flusher goroutine exists
	runFunc func()
	closed  bool
	wake    chan struct{} // capacity 1: the queue is full, or the Group is closing

	// Owned by the flusher.
	timer     *time.Timer
	ctx       *batchContext // a finished batch context to reuse, or nil
	batch     []*groupReq
	keys      []Key
	results   []ClaimResult
	claims    []Claim
	errs      []error
	abandoned []Claim
}

// enqueue queues r, starting the flusher if none runs. It fails with
// ErrClosed after Close.
func (b *batcher) enqueue(r *groupReq) error {
	if b.g.o.Linger > 0 {
		r.at = time.Now()
	}
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return ErrClosed
	}
	b.queue = append(b.queue, r)
	if len(b.queue) >= b.g.o.MaxBatch {
		select {
		case b.wake <- struct{}{}:
		default:
		}
	}
	if !b.running {
		b.running = true
		b.g.flushers.Add(1)
		go b.runFunc()
	}
	b.mu.Unlock()
	return nil
}

// run is the flusher: it sends batches until the queue is empty, then
// exits.
func (b *batcher) run() {
	defer b.g.flushers.Done()
	max, linger := b.g.o.MaxBatch, b.g.o.Linger
	for {
		b.mu.Lock()
		if len(b.queue) == 0 {
			b.running = false
			b.mu.Unlock()
			return
		}
		if linger > 0 && !b.closed && len(b.queue) < max {
			if wait := linger - time.Since(b.queue[0].at); wait > 0 {
				b.mu.Unlock()
				b.timer.Reset(wait)
				select {
				case <-b.timer.C:
				case <-b.wake:
					b.timer.Stop()
				}
				b.mu.Lock()
			}
		}
		n := min(len(b.queue), max)
		b.batch = append(b.batch[:0], b.queue[:n]...)
		rest := copy(b.queue, b.queue[n:])
		clear(b.queue[rest:])
		b.queue = b.queue[:rest]
		select {
		case <-b.wake:
		default:
		}
		b.mu.Unlock()
		b.flush()
	}
}

// flush sends b.batch as one batch call and replies to every request.
func (b *batcher) flush() {
	g := b.g
	n := len(b.batch)
	ctx := b.ctx
	if ctx == nil {
		ctx = new(batchContext)
	}
	ctx.reset(b.batch[0].ctx, time.Now().Add(g.o.Timeout))
	var err error
	if b.kind == opClaim {
		b.keys = b.keys[:0]
		for _, r := range b.batch {
			b.keys = append(b.keys, r.key)
		}
		b.results = resize(b.results, n)
		err = g.s.TryClaimBatch(ctx, b.keys, b.results)
		for i, r := range b.batch {
			if err != nil {
				r.err = err
				continue
			}
			res := &b.results[i]
			r.out, r.res, r.err = res.Outcome, res.Claim, res.Err
		}
		clear(b.keys)
		clear(b.results)
	} else {
		b.claims = b.claims[:0]
		for _, r := range b.batch {
			b.claims = append(b.claims, r.claim)
		}
		b.errs = resize(b.errs, n)
		if b.kind == opConfirm {
			err = g.s.ConfirmBatch(ctx, b.claims, b.errs)
		} else {
			err = g.s.ReleaseBatch(ctx, b.claims, b.errs)
		}
		for i, r := range b.batch {
			if err != nil {
				r.err = err
				continue
			}
			r.err = b.errs[i]
		}
		clear(b.claims)
		clear(b.errs)
	}
	for _, r := range b.batch {
		b.reply(r)
	}
	clear(b.batch)
	if len(b.abandoned) > 0 {
		// Claims nobody holds: give them back now rather than let the keys
		// wait a whole lease. A failure leaves them to lapse.
		b.errs = resize(b.errs, len(b.abandoned))
		_ = g.s.ReleaseBatch(ctx, b.abandoned, b.errs)
		clear(b.abandoned)
		clear(b.errs)
		b.abandoned = b.abandoned[:0]
	}
	b.ctx = nil
	if ctx.finish() {
		b.ctx = ctx
	}
}

// reply hands r's reply to its caller or, when the caller left, disposes
// of it: a claim taken for nobody is queued for release.
func (b *batcher) reply(r *groupReq) {
	if r.state.CompareAndSwap(reqWaiting, reqReplied) {
		r.done <- struct{}{} // never blocks: capacity 1, one reply per request
		return
	}
	if b.kind == opClaim && r.err == nil && r.out == Claimed {
		b.abandoned = append(b.abandoned, r.res)
	}
	b.g.put(r)
}

// resize returns s with length n, reusing its array when large enough.
func resize[T any](s []T, n int) []T {
	if cap(s) < n {
		return make([]T, n)
	}
	return s[:n]
}
