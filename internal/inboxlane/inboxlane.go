// Package inboxlane is the batching core the transactional inbox's two
// front ends (package inbox on database/sql, package inbox/pgxinbox on
// pgx) share: lanes, each one open database transaction that several
// deliveries run in one after the other, each under its own savepoint, and
// one COMMIT per batch whose outcome every member's settlement waits for.
//
// A delivery's Select takes a free lane (waiting, without a connection,
// until one is free), begins the lane's transaction when it has none (the
// batch's first member needs no savepoint: the transaction's start is its
// boundary), or opens a savepoint in the open one, and inserts the key.
// The handler runs in the lane's transaction. When the delivery settles,
// a failure rolls back to its savepoint (the first member: the whole
// transaction, which holds nothing else) and a success leaves its work in
// the batch; then the lane goes to the next waiting delivery, or commits
// when it holds MaxBatch members, when it is Linger old, or when no
// delivery is waiting. A member's Settle(Completed) returns only after the
// COMMIT covering it succeeded, and returns an error when it failed. Just
// before the COMMIT, the lane checks that its transaction is still the
// one it began (see Tx.Check); when a handler ended it with a COMMIT or
// ROLLBACK statement, the lane rolls back whatever is open instead and
// every member's settlement fails with ErrAborted.
package inboxlane

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/acemq/msgaudit/receiver"
)

// Errors shared by both front ends (package inbox re-exports them).
var (
	// ErrTxEnded: the handler committed or rolled back the inbox's
	// transaction itself.
	ErrTxEnded = errors.New("inbox: the handler committed or rolled back the inbox transaction itself; return nil to commit or an error to roll back instead")
	// ErrCommit wraps a failed COMMIT, whose outcome may be unknown.
	ErrCommit = errors.New("inbox: commit failed, outcome unknown; the delivery is requeued")
	// ErrAborted: another member of the batch ended or broke the shared
	// transaction, so this delivery's work was not committed.
	ErrAborted = errors.New("inbox: another delivery of the same batch ended or broke the shared transaction; the delivery is requeued")
)

// errGone says why a batch was rolled back instead of committed.
var errGone = errors.New("the batch's transaction is not the one the inbox began (a handler ran COMMIT or ROLLBACK as a statement?), so it was rolled back, not committed")

// Tx is one lane's open transaction as a front end drives it. Each method
// is one database call the front end counts in its metrics.
type Tx interface {
	// Insert inserts (namespace, key) with ON CONFLICT DO NOTHING, after
	// opening the member's savepoint when savepoint is true (pgx sends both
	// in one round trip). It reports whether a row was inserted.
	Insert(ctx context.Context, savepoint bool, ns, key string) (bool, error)
	// RollbackTo rolls back to the member's savepoint and releases it.
	RollbackTo(ctx context.Context) error
	// Check runs just before Commit: it fails unless the transaction is
	// still the one Begin began. A front end takes a savepoint of its own
	// when the transaction begins (before the first member's INSERT) and
	// releases it here; a handler that ends the transaction with a COMMIT
	// or ROLLBACK statement takes that savepoint with it, even when a
	// later statement began another transaction (SQLite's SAVEPOINT does).
	Check(ctx context.Context) error
	// Commit commits the transaction; ctx bounds it.
	Commit(ctx context.Context) error
	// Rollback rolls the transaction back; ctx bounds it.
	Rollback(ctx context.Context) error
	// Value is what the handler's context carries (the *sql.Tx, the pgx.Tx).
	Value() any
}

// Config configures a Pool.
type Config struct {
	// Lanes is the number of lanes (at least 1).
	Lanes int
	// MaxBatch is the most members one COMMIT covers (at least 1).
	MaxBatch int
	// Linger is how long after its first member a lane stops taking new
	// members and commits (at the next member boundary).
	Linger time.Duration
	// Begin begins a lane's transaction; ctx bounds the BEGIN only (the
	// transaction outlives it).
	Begin func(ctx context.Context) (Tx, error)
	// WithTx returns ctx carrying tx's Value for the handler.
	WithTx func(ctx context.Context, v any) context.Context
	// Ended reports whether err says the transaction was ended already
	// (sql.ErrTxDone, pgx.ErrTxClosed).
	Ended func(err error) bool
	// Broken reports whether err says an earlier statement left the
	// transaction unusable (PostgreSQL's 25P02, in failed transaction).
	Broken func(err error) bool
	// Describe wraps an error of operation op for the caller.
	Describe func(op string, err error) error
}

// Pool is a set of lanes. It is safe for concurrent use.
type Pool struct {
	c       Config
	mu      sync.Mutex
	free    []*lane
	waiters []chan *lane // FIFO; each buffered (1)
	total   int          // lanes in existence
	target  int          // lanes wanted (SetLanes)
	commits atomic.Uint64
	members atomic.Uint64
}

type lane struct {
	tx    Tx
	b     *batch
	start time.Time
	n     int                 // members awaiting the batch's COMMIT
	keys  map[string]struct{} // keys inserted in the open batch
	last  *member             // the latest member whose handler succeeded
}

type batch struct {
	done       chan struct{}
	err        error   // for every member but the culprit
	culprit    *member // the member that ended or broke the transaction
	culpritErr error
}

type member struct {
	p       *Pool
	l       *lane
	tx      Tx
	first   bool
	k       string
	settled bool
}

// New returns a Pool of c.Lanes lanes.
func New(c Config) *Pool {
	if c.Lanes < 1 {
		c.Lanes = 1
	}
	if c.MaxBatch < 1 {
		c.MaxBatch = 1
	}
	p := &Pool{c: c}
	p.SetLanes(c.Lanes)
	return p
}

// SetLanes sets the number of lanes (at least 1). Lanes beyond n are
// retired when they become free.
func (p *Pool) SetLanes(n int) {
	n = max(n, 1)
	p.mu.Lock()
	defer p.mu.Unlock()
	p.target = n
	for p.total < n {
		p.total++
		p.put(&lane{})
	}
	for p.total > n && len(p.free) > 0 {
		p.free = p.free[:len(p.free)-1]
		p.total--
	}
}

// Lanes returns the number of lanes.
func (p *Pool) Lanes() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.target
}

// MaxBatch returns the most members one COMMIT covers.
func (p *Pool) MaxBatch() int { return p.c.MaxBatch }

// Linger returns the batch's age at which a lane commits.
func (p *Pool) Linger() time.Duration { return p.c.Linger }

// Stats returns the COMMITs the lanes ran or meant to run (successful or
// not, or replaced by a ROLLBACK when the transaction failed its check)
// and the members they covered.
func (p *Pool) Stats() (commits, members uint64) { return p.commits.Load(), p.members.Load() }

// Waiting returns how many deliveries wait for a lane.
func (p *Pool) Waiting() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.waiters)
}

// put gives a lane without an open batch to the first waiter, or frees
// it. p.mu is held.
func (p *Pool) put(l *lane) {
	if p.total > p.target {
		p.total--
		return
	}
	if len(p.waiters) > 0 {
		w := p.waiters[0]
		p.waiters[0] = nil
		p.waiters = p.waiters[1:]
		w <- l
		return
	}
	p.free = append(p.free, l)
}

// release returns a lane without an open transaction.
func (p *Pool) release(l *lane) {
	p.mu.Lock()
	p.put(l)
	p.mu.Unlock()
}

// acquire takes a lane, waiting (bounded by ctx) for one to be free.
func (p *Pool) acquire(ctx context.Context) (*lane, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	p.mu.Lock()
	if n := len(p.free); n > 0 {
		l := p.free[n-1]
		p.free = p.free[:n-1]
		p.mu.Unlock()
		return l, nil
	}
	w := make(chan *lane, 1)
	p.waiters = append(p.waiters, w)
	p.mu.Unlock()
	select {
	case l := <-w:
		return l, nil
	case <-ctx.Done():
	}
	p.mu.Lock()
	for i, x := range p.waiters {
		if x == w {
			p.waiters = append(p.waiters[:i], p.waiters[i+1:]...)
			p.mu.Unlock()
			return nil, ctx.Err()
		}
	}
	p.mu.Unlock()
	// The lane was handed over as ctx ended: pass it on.
	l := <-w
	p.finish(context.WithoutCancel(ctx), l)
	return nil, ctx.Err()
}

// finish ends the lane holder's turn: the lane goes to the next waiter
// with its batch open, or its batch commits and the lane is released.
func (p *Pool) finish(ctx context.Context, l *lane) {
	if l.tx == nil {
		p.release(l)
		return
	}
	p.mu.Lock()
	if len(p.waiters) > 0 && l.n < p.c.MaxBatch && time.Since(l.start) < p.c.Linger && p.total <= p.target {
		w := p.waiters[0]
		p.waiters[0] = nil
		p.waiters = p.waiters[1:]
		w <- l
		p.mu.Unlock()
		return
	}
	p.mu.Unlock()
	p.commit(ctx, l)
	p.release(l)
}

// commit commits l's batch and tells its members.
func (p *Pool) commit(ctx context.Context, l *lane) {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = detached(ctx)
		defer cancel()
	}
	b := l.b
	// A handler may have ended the transaction with a COMMIT or ROLLBACK
	// statement, which the driver does not see: on PostgreSQL the COMMIT
	// below would then succeed (with a warning) and acknowledge members
	// whose keys were rolled back; on SQLite a later member's SAVEPOINT
	// began a new transaction, which it would commit.
	err := l.tx.Check(ctx)
	// A transaction an earlier statement broke is still the lane's: its
	// COMMIT fails (PostgreSQL rolls it back) and says so, as before.
	checked := err == nil || p.c.Broken(err)
	if checked {
		err = l.tx.Commit(ctx)
	} else {
		_ = l.tx.Rollback(ctx)
	}
	p.commits.Add(1)
	p.members.Add(uint64(l.n))
	if b == nil { // no member awaits it
		l.reset()
		return
	}
	if err != nil {
		switch {
		case !checked && !p.c.Ended(err):
			b.err = fmt.Errorf("%w: %w: %w", ErrAborted, errGone, err)
		case p.c.Ended(err) && l.last != nil:
			b.culprit, b.culpritErr = l.last, ErrTxEnded
			b.err = fmt.Errorf("%w: %w", ErrAborted, err)
		default:
			b.err = fmt.Errorf("%w: %w", ErrCommit, err)
		}
	}
	l.reset()
	close(b.done)
}

// abort rolls l's transaction back after cause made it unusable: the
// batch's members are told (culprit, when known, with its own error).
func (p *Pool) abort(l *lane, cause error, culprit *member) {
	ctx, cancel := detached(context.Background())
	_ = l.tx.Rollback(ctx)
	cancel()
	b := l.b
	if b == nil { // no member awaits the COMMIT
		l.reset()
		return
	}
	b.err = fmt.Errorf("%w: %w", ErrAborted, cause)
	if culprit != nil {
		b.culprit = culprit
		if p.c.Ended(cause) {
			b.culpritErr = ErrTxEnded
		} else {
			b.culpritErr = fmt.Errorf("inbox: the handler returned nil but left the transaction unusable: %w", cause)
		}
	}
	l.reset()
	close(b.done)
}

// detachTimeout bounds the rollbacks and commits a lane runs outside a
// member's settlement (after a delivery's context ended, for example).
const detachTimeout = 10 * time.Second

// detached returns a context with ctx's values, not its cancellation,
// ending after detachTimeout.
func detached(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), detachTimeout)
}

func (l *lane) reset() {
	l.tx, l.b, l.n, l.last = nil, nil, 0, nil
	clear(l.keys)
}

// fault reports whether err, met at a lane's statement, was caused by the
// member before (it ended the transaction or left it broken).
func (p *Pool) fault(err error) bool { return p.c.Ended(err) || p.c.Broken(err) }

// Select is the inbox's receiver.Selector.Select for the stored namespace
// and key.
func (p *Pool) Select(ctx context.Context, ns, key string) (receiver.Decision, error) {
	fail := func(op string, err error) (receiver.Decision, error) {
		if cerr := ctx.Err(); cerr != nil && !errors.Is(err, cerr) {
			return receiver.Decision{}, fmt.Errorf("inbox: %s: %w (%v)", op, cerr, err)
		}
		return receiver.Decision{}, p.c.Describe(op, err)
	}
	l, err := p.acquire(ctx)
	if err != nil {
		return fail("waiting for a lane", err)
	}
	k := ns + "\x00" + key
	if l.tx != nil {
		if _, ok := l.keys[k]; ok {
			// The key's first delivery is in this very batch, not yet
			// committed: the outcome is unknown until the COMMIT.
			p.finish(context.WithoutCancel(ctx), l)
			return receiver.Decision{Verdict: receiver.Defer, Reason: "in-flight", Detail: "in-batch"}, nil
		}
	}
	first := l.tx == nil
	if first {
		tx, err := p.c.Begin(ctx)
		if err != nil {
			p.release(l)
			return fail("begin", err)
		}
		l.tx, l.start = tx, time.Now()
	}
	tx := l.tx
	inserted, err := tx.Insert(ctx, !first, ns, key)
	if err != nil {
		if !first && p.fault(err) {
			p.abort(l, err, l.last)
			p.release(l)
		} else {
			p.undo(ctx, l, first)
		}
		return fail("recording the key", err)
	}
	if !inserted {
		p.undo(ctx, l, first)
		return receiver.Decision{Verdict: receiver.Reject, Reason: "inbox", Detail: "recorded"}, nil
	}
	if l.b == nil {
		l.b = &batch{done: make(chan struct{})}
	}
	if l.keys == nil {
		l.keys = make(map[string]struct{}, min(p.c.MaxBatch, 64))
	}
	l.keys[k] = struct{}{}
	m := &member{p: p, l: l, tx: tx, first: first, k: k}
	return receiver.Decision{
		Verdict: receiver.Accept, Reason: "new", Detail: "new",
		Context: func(c context.Context) context.Context { return p.c.WithTx(c, tx.Value()) },
		Settle:  m.settle,
	}, nil
}

// undo rolls back the lane holder's own work (the whole transaction for a
// batch's first member) and ends its turn.
func (p *Pool) undo(ctx context.Context, l *lane, first bool) {
	ctx = context.WithoutCancel(ctx) // commit bounds itself
	if first {
		_ = l.tx.Rollback(ctx)
		l.reset()
		p.release(l)
		return
	}
	if err := l.tx.RollbackTo(ctx); err != nil {
		p.abort(l, err, nil)
		p.release(l)
		return
	}
	p.finish(ctx, l)
}

// settle is the member's Decision.Settle.
func (m *member) settle(ctx context.Context, s receiver.Settlement) error {
	if m.settled { // Failed after a failed Completed: nothing is left to undo
		return nil
	}
	m.settled = true
	p, l := m.p, m.l
	if s != receiver.Completed {
		delete(l.keys, m.k)
		if m.first {
			err := l.tx.Rollback(ctx)
			l.reset()
			p.release(l)
			if err != nil && !p.c.Ended(err) {
				return fmt.Errorf("inbox: rollback: %w", err)
			}
			return nil
		}
		if err := l.tx.RollbackTo(ctx); err != nil {
			// The handler ended the transaction or broke it, or the
			// connection is gone: the batch cannot commit.
			p.abort(l, err, m)
			p.release(l)
			return nil
		}
		p.finish(ctx, l)
		return nil
	}
	l.n++
	l.last = m
	b := l.b
	p.finish(ctx, l)
	select {
	case <-b.done:
	case <-ctx.Done():
		return fmt.Errorf("%w: waiting for the batch's commit: %w", ErrCommit, ctx.Err())
	}
	if b.err == nil {
		return nil
	}
	if b.culprit == m {
		return b.culpritErr
	}
	return b.err
}
