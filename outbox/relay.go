package outbox

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
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
	err      error // the publish's outcome
}

// Run is a relay: it publishes the committed messages with p, each once
// the broker confirmed it, marks them sent, and returns nil when ctx ends.
// Several relays, in one process or many, may run on one table: each
// takes rows under a lease (Options.Lease) and skips rows another holds.
// Messages with the same OrderKey leave in commit order, one at a time;
// a message waits while an earlier one of its key is pending, and goes
// once that one is sent or parked.
//
// A relay killed between a publish and its mark leaves the row to be
// published again, with the same id, once its lease has passed: the
// receiving side absorbs the resend (JetStream's duplicate window, the
// consumers' keys). A message the broker refuses (ErrRefused) is retried
// with a growing delay and parked after Options.MaxAttempts refusals,
// with the error as its reason; other errors are retried without limit.
// Run wakes at once for messages Send recorded in this process and looks
// for others' every 100ms.
func (ob *Outbox) Run(ctx context.Context, p Publisher) error {
	if p == nil {
		return fmt.Errorf("%w: nil Publisher", ErrConfig)
	}
	r := &relay{ob: ob, p: p}
	quick := time.Duration(0) // the wait after a wake: the sender may not have committed yet
	for {
		if ctx.Err() != nil {
			return nil
		}
		rows, err := r.claim(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			ob.log.Warn("outbox: relay: taking messages failed; retrying", "err", logkey.Error(err))
			if !sleep(ctx, r.backoff()) {
				return nil
			}
			continue
		}
		if len(rows) == 0 {
			wait := poll
			if quick > 0 {
				wait, quick = quick, min(quick*2, poll)
			}
			t := time.NewTimer(wait)
			select {
			case <-ctx.Done():
				t.Stop()
				return nil
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
		if err := r.publish(ctx, rows); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			ob.log.Warn("outbox: relay: recording what was sent failed; those messages will be sent again", "err", logkey.Error(err))
			if !sleep(ctx, r.backoff()) {
				return nil
			}
		}
	}
}

// relay is one Run's state.
type relay struct {
	ob      *Outbox
	p       Publisher
	token   string
	claimed time.Time // when the current claim was taken
	fails   int       // consecutive transient failures, for backoff
}

// backoff is the delay after a failure: 100ms doubling to 5s, with jitter.
func (r *relay) backoff() time.Duration {
	r.fails++
	d := 100 * time.Millisecond << min(r.fails-1, 6)
	d = min(d, 5*time.Second)
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
	budget := claimBytes
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
		// The claim holds at most claimBytes of bodies and headers in
		// memory (and always one row): the rest wait for the next claim.
		if budget -= size + int64(len(headers)); budget < 0 && len(rows) > 0 {
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
	r.token, r.claimed = outboxid.Random(), now
	args := make([]any, 0, len(rows)+2)
	args = append(args, r.token, now.Add(ob.o.Lease).UnixMicro())
	for _, rw := range rows {
		args = append(args, rw.seq)
	}
	if _, err := tx.ExecContext(ctx, ob.s.lease(len(rows)), args...); err != nil {
		return nil, err
	}
	bySeq := make(map[int64]*row, len(rows))
	for _, rw := range rows {
		bySeq[rw.seq] = rw
	}
	bq, err := tx.QueryContext(ctx, ob.s.bodies(len(rows)), args[2:]...)
	if err != nil {
		return nil, err
	}
	for bq.Next() {
		var seq int64
		var body []byte
		if err := bq.Scan(&seq, &body); err != nil {
			bq.Close()
			return nil, err
		}
		if rw := bySeq[seq]; rw != nil {
			rw.m.Body = body
		}
	}
	if err := bq.Close(); err != nil {
		return nil, err
	}
	if err := bq.Err(); err != nil {
		return nil, err
	}
	return rows, tx.Commit()
}

// publish publishes rows, Concurrency at a time, and records the outcomes.
func (r *relay) publish(ctx context.Context, rows []*row) error {
	ob := r.ob
	// Every publish of the claim ends by half its lease, so the marks land
	// before another relay may take the rows: a row whose turn comes
	// later is not published and goes back at once.
	pctx, cancel := context.WithDeadline(ctx, r.claimed.Add(ob.o.Lease/2))
	defer cancel()
	sem := make(chan struct{}, ob.o.Concurrency)
	var wg sync.WaitGroup
	for _, rw := range rows {
		if rw.err != nil {
			continue
		}
		sem <- struct{}{}
		if err := pctx.Err(); err != nil {
			<-sem
			rw.err = fmt.Errorf("not published within half the lease: %w", err)
			continue
		}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			rw.err = r.p.Publish(pctx, rw.id, rw.m)
		}()
	}
	wg.Wait()
	// The outcomes are recorded even when ctx ended: a message the
	// broker confirmed is marked sent now rather than sent again later.
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	now := time.Now()
	sent := make([]any, 0, len(rows)+2)
	sent = append(sent, now.UnixMicro(), r.token)
	transient := false
	var firstErr error
	for _, rw := range rows {
		switch {
		case rw.err == nil:
			sent = append(sent, rw.seq)
			continue
		case errors.Is(rw.err, ErrRefused):
			reason := logkey.Error(rw.err)
			if rw.attempts+1 >= ob.o.MaxAttempts {
				ob.log.Warn("outbox: relay: message parked after the broker refused it", "id", rw.id,
					"destination", logkey.String(rw.m.Destination), "attempts", rw.attempts+1, "reason", reason)
				if _, err := ob.db.ExecContext(dctx, ob.s.park(), now.UnixMicro(), reason, rw.seq, r.token); err != nil && firstErr == nil {
					firstErr = err
				}
				continue
			}
			due := now.Add(min(100*time.Millisecond<<min(rw.attempts, 10), time.Minute))
			if _, err := ob.db.ExecContext(dctx, ob.s.retry(), due.UnixMicro(), reason, 1, rw.seq, r.token); err != nil && firstErr == nil {
				firstErr = err
			}
		default:
			transient = true
			due := now.Add(min(100*time.Millisecond<<min(r.fails, 6), 5*time.Second))
			if _, err := ob.db.ExecContext(dctx, ob.s.retry(), due.UnixMicro(), logkey.Error(rw.err), 0, rw.seq, r.token); err != nil && firstErr == nil {
				firstErr = err
			}
		}
	}
	if len(sent) > 2 {
		if _, err := ob.db.ExecContext(dctx, ob.s.sent(len(sent)-2), sent...); err != nil && firstErr == nil {
			firstErr = err
		}
	}
	if transient {
		var example error
		for _, rw := range rows {
			if rw.err != nil && !errors.Is(rw.err, ErrRefused) {
				example = rw.err
				break
			}
		}
		ob.log.Warn("outbox: relay: publishing failed; retrying", "err", logkey.Error(example))
		if firstErr == nil && !sleep(ctx, r.backoff()) {
			return nil
		}
	} else {
		r.fails = 0
	}
	return firstErr
}
