package outbox

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/acemq/msgaudit/inbox"
	"github.com/acemq/msgaudit/internal/logkey"
	"github.com/acemq/msgaudit/internal/outboxid"
)

// row is one claimed message.
type row struct {
	seq      int64
	id       string
	m        Message
	attempts int
	size     int64 // body and header bytes, held in memory until recorded
	c        *claim
	err      error // the publish's outcome
}

// claim is one claim's lease: its token, and the context its publishes
// run in, which ends at half the lease and is released once every row
// of the claim has been recorded.
type claim struct {
	token  string
	ctx    context.Context
	cancel context.CancelFunc
	rows   atomic.Int32 // rows not yet recorded
}

// recorded counts row rw recorded: its bytes are free again.
func (r *relay) recorded(rw *row) {
	if rw.c.rows.Add(-1) == 0 {
		rw.c.cancel()
	}
	r.held.Add(-rw.size)
	select {
	case r.freed <- struct{}{}:
	default:
	}
}

// Run is a relay: it publishes the committed messages with p, each once
// the broker confirmed it, marks them sent, and returns nil when ctx ends.
// Several relays, in one process or many, may run on one table: each
// takes rows under a lease (Options.Lease) and skips rows another holds.
// Messages with the same OrderKey leave in commit order, one at a time;
// a message waits while an earlier one of its key is pending, and goes
// once that one is sent or parked.
//
// The relay works as a pipeline: it takes the next rows while the last
// ones are still being published, keeps Options.Concurrency publishes in
// flight, and marks the confirmed ones in batches, within 2ms of their
// confirmation. A relay killed between a publish and its mark leaves the
// row to be published again, with the same id, once its lease has passed:
// the receiving side absorbs the resend (JetStream's duplicate window,
// the consumers' keys). A message the broker refuses (ErrRefused) is
// retried with a growing delay and parked after Options.MaxAttempts
// refusals, with the error as its reason; other errors are retried
// without limit. Run wakes at once for messages Send recorded in this
// process and looks for others' every 100ms.
func (ob *Outbox) Run(ctx context.Context, p Publisher) error {
	if p == nil {
		return fmt.Errorf("%w: nil Publisher", ErrConfig)
	}
	r := &relay{ob: ob, p: p, ctx: ctx, results: make(chan *row, claimBatch+ob.o.Concurrency), freed: make(chan struct{}, 1)}
	recorded := make(chan struct{})
	go r.record(recorded)
	sem := make(chan struct{}, ob.o.Concurrency)
	var publishing sync.WaitGroup
	defer func() {
		publishing.Wait()
		close(r.results)
		<-recorded
	}()
	// The next claim is taken while this one's rows are published.
	batches := make(chan []*row, 1)
	go r.claims(ctx, batches)
	for rows := range batches {
		for _, rw := range rows {
			if rw.err == nil {
				acquired := false
				select {
				case sem <- struct{}{}:
					acquired = true
				case <-rw.c.ctx.Done():
				}
				if err := rw.c.ctx.Err(); err != nil {
					// Stopped, or half the lease gone before its turn:
					// it goes back at once, unpublished.
					if acquired {
						<-sem
					}
					rw.err = fmt.Errorf("not published: %w", err)
				}
			}
			if rw.err != nil {
				r.results <- rw
				continue
			}
			publishing.Add(1)
			go func() {
				defer publishing.Done()
				rw.err = r.p.Publish(rw.c.ctx, rw.id, rw.m)
				<-sem
				r.results <- rw
			}()
		}
	}
	return nil
}

// claims takes rows and hands them to Run until ctx ends, then closes
// batches.
func (r *relay) claims(ctx context.Context, batches chan<- []*row) {
	defer close(batches)
	ob := r.ob
	quick := time.Duration(0) // the wait after a wake: the sender may not have committed yet
	for {
		if ctx.Err() != nil {
			return
		}
		if n := r.failing.Load(); n > 0 && !sleep(ctx, backoff(int(n))) {
			return
		}
		// The rows in flight hold claimBytes at most: past it, the next
		// claim waits for some to be recorded.
		for r.held.Load() >= claimBytes {
			select {
			case <-ctx.Done():
				return
			case <-r.freed:
			}
		}
		rows, err := r.claim(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			r.claimFails++
			ob.log.Warn("outbox: relay: taking messages failed; retrying", "err", logkey.Error(err))
			if !sleep(ctx, backoff(r.claimFails)) {
				return
			}
			continue
		}
		r.claimFails = 0
		if len(rows) == 0 {
			wait := poll
			if quick > 0 {
				wait, quick = quick, min(quick*2, poll)
			}
			t := time.NewTimer(wait)
			select {
			case <-ctx.Done():
				t.Stop()
				return
			case <-ob.wake:
				t.Stop()
				quick = time.Millisecond
			case <-t.C:
				if wait >= poll {
					quick = 0
				}
			}
			continue
		}
		quick = time.Millisecond
		batches <- rows // Run takes every batch, even after ctx ends
	}
}

// relay is one Run's state.
type relay struct {
	ob         *Outbox
	p          Publisher
	ctx        context.Context // Run's
	results    chan *row       // published or failed rows, to record
	failing    atomic.Int32    // consecutive transient failures: the claims wait
	held       atomic.Int64    // bytes of the rows claimed and not yet recorded
	freed      chan struct{}   // signalled when rows are recorded
	claimFails int
}

// backoff is the delay after n failures in a row: 100ms doubling to 5s,
// with jitter.
func backoff(n int) time.Duration {
	d := min(100*time.Millisecond<<min(max(n, 1)-1, 6), 5*time.Second)
	return d/2 + rand.N(d/2+1)
}

func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// claim takes up to claimBatch due rows under a new lease token.
func (r *relay) claim(ctx context.Context) ([]*row, error) {
	ob := r.ob
	var opts *sql.TxOptions
	if ob.o.Dialect == inbox.MySQL {
		// No gap locks: a claim must not hold up the senders' INSERTs.
		opts = &sql.TxOptions{Isolation: sql.LevelReadCommitted}
	}
	tx, err := ob.db.BeginTx(ctx, opts)
	if err != nil {
		return nil, err
	}
	defer func() { _ = tx.Rollback() }()
	now := time.Now()
	q, err := tx.QueryContext(ctx, ob.s.claim, now.UnixMicro(), claimBatch)
	if err != nil {
		return nil, err
	}
	var rows []*row
	held := r.held.Load()
	budget := claimBytes - held
	for q.Next() {
		var (
			rw      row
			headers []byte
			key     sql.NullString
			size    int64
		)
		if err := q.Scan(&rw.seq, &rw.id, &rw.m.Destination, &headers, &size, &key, &rw.attempts); err != nil {
			q.Close()
			return nil, err
		}
		// The relay holds at most claimBytes of bodies and headers in
		// memory (always one row when it holds none): the rest wait.
		rw.size = size + int64(len(headers))
		if budget -= rw.size; budget < 0 && (len(rows) > 0 || held > 0) {
			break
		}
		rw.m.OrderKey = key.String
		if err := json.Unmarshal(headers, &rw.m.Headers); err != nil {
			rw.err = fmt.Errorf("%w: unreadable headers: %v", ErrRefused, err)
		}
		rows = append(rows, &rw)
	}
	if err := q.Close(); err != nil {
		return nil, err
	}
	if err := q.Err(); err != nil {
		return nil, err
	}
	if len(rows) == 0 {
		return nil, tx.Commit()
	}
	c := &claim{token: outboxid.Random()}
	c.rows.Store(int32(len(rows)))
	// Every publish of the claim ends by half its lease, so its marks
	// land before another relay may take the rows.
	c.ctx, c.cancel = context.WithDeadline(r.ctx, now.Add(ob.o.Lease/2))
	var size int64
	for _, rw := range rows {
		rw.c = c
		size += rw.size
	}
	r.held.Add(size)
	fail := func(err error) ([]*row, error) { // the rows go back when the transaction rolls back
		c.cancel()
		r.held.Add(-size)
		return nil, err
	}
	args := make([]any, 0, len(rows)+2)
	args = append(args, c.token, now.Add(ob.o.Lease).UnixMicro())
	for _, rw := range rows {
		args = append(args, rw.seq)
	}
	if _, err := tx.ExecContext(ctx, ob.s.lease(len(rows)), args...); err != nil {
		return fail(err)
	}
	bySeq := make(map[int64]*row, len(rows))
	for _, rw := range rows {
		bySeq[rw.seq] = rw
	}
	bq, err := tx.QueryContext(ctx, ob.s.bodies(len(rows)), args[2:]...)
	if err != nil {
		return fail(err)
	}
	for bq.Next() {
		var seq int64
		var body []byte
		if err := bq.Scan(&seq, &body); err != nil {
			bq.Close()
			return fail(err)
		}
		if rw := bySeq[seq]; rw != nil {
			rw.m.Body = body
		}
	}
	if err := bq.Close(); err != nil {
		return fail(err)
	}
	if err := bq.Err(); err != nil {
		return fail(err)
	}
	if err := tx.Commit(); err != nil {
		return fail(err)
	}
	return rows, nil
}

// markEvery is how long a confirmed row waits at most for its mark, which
// batches the marks of rows confirmed together.
const markEvery = 2 * time.Millisecond

// record records the outcomes of r.results until it is closed: confirmed
// rows are marked sent in batches, refused ones retried later or parked,
// the others released for a later attempt.
func (r *relay) record(done chan<- struct{}) {
	defer close(done)
	ob := r.ob
	sent := map[*claim][]any{}
	var held []*row // rows whose mark is pending, to count as recorded after it
	n := 0
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	flush := func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		now := time.Now().UnixMicro()
		for c, seqs := range sent {
			for len(seqs) > 0 {
				k := min(len(seqs), claimBatch)
				args := append([]any{now, c.token}, seqs[:k]...)
				if _, err := ob.db.ExecContext(ctx, ob.s.sent(k), args...); err != nil {
					ob.log.Warn("outbox: relay: recording what was sent failed; those messages will be sent again", "err", logkey.Error(err))
				}
				seqs = seqs[k:]
			}
		}
		clear(sent)
		for _, rw := range held {
			r.recorded(rw)
		}
		held, n = held[:0], 0
	}
	for {
		select {
		case rw, ok := <-r.results:
			if !ok {
				flush()
				return
			}
			if rw.err == nil {
				r.failing.Store(0)
				if n == 0 {
					timer.Reset(markEvery)
				}
				sent[rw.c] = append(sent[rw.c], rw.seq)
				held = append(held, rw)
				if n++; n >= claimBatch {
					timer.Stop()
					flush()
				}
				continue
			}
			r.failed(rw)
			r.recorded(rw)
		case <-timer.C:
			flush()
		}
	}
}

// failed records a row whose publish failed.
func (r *relay) failed(rw *row) {
	ob := r.ob
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	now := time.Now()
	var err error
	switch {
	case errors.Is(rw.err, ErrRefused):
		reason := logkey.Error(rw.err)
		if rw.attempts+1 >= ob.o.MaxAttempts {
			ob.log.Warn("outbox: relay: message parked after the broker refused it", "id", rw.id,
				"destination", logkey.String(rw.m.Destination), "attempts", rw.attempts+1, "reason", reason)
			_, err = ob.db.ExecContext(ctx, ob.s.park(), now.UnixMicro(), reason, rw.seq, rw.c.token)
			break
		}
		due := now.Add(min(100*time.Millisecond<<min(rw.attempts, 10), time.Minute))
		_, err = ob.db.ExecContext(ctx, ob.s.retry(), due.UnixMicro(), reason, 1, rw.seq, rw.c.token)
	default:
		stopped := r.ctx.Err() != nil
		due := now
		if !stopped {
			n := r.failing.Add(1)
			due = now.Add(backoff(int(n)))
			if n == 1 || n%100 == 0 {
				ob.log.Warn("outbox: relay: publishing failed; retrying", "err", logkey.Error(rw.err), "failures", n)
			}
		}
		_, err = ob.db.ExecContext(ctx, ob.s.retry(), due.UnixMicro(), logkey.Error(rw.err), 0, rw.seq, rw.c.token)
	}
	if err != nil {
		ob.log.Warn("outbox: relay: recording a failed publish failed; the message goes again once its lease has passed", "err", logkey.Error(err))
	}
}
