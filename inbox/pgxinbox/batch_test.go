package pgxinbox_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/acemq/msgaudit/inbox"
	"github.com/acemq/msgaudit/inbox/pgxinbox"
	"github.com/acemq/msgaudit/receiver"
	"github.com/jackc/pgx/v5"
)

// runBatch delivers keys through r as one batch in ib's single lane, in
// order: keys[0] takes the lane and waits in its handler until every
// other delivery waits for the lane, each queued after the one before.
func runBatch(t *testing.T, ib *pgxinbox.Inbox, r *receiver.Receiver, keys []string,
	h func(i int) func(ctx context.Context, tx pgx.Tx, m *receiver.Message) error) []receiver.Result {
	t.Helper()
	res := make([]receiver.Result, len(keys))
	var wg sync.WaitGroup
	in0, release := make(chan struct{}), make(chan struct{})
	for i, key := range keys {
		hi := h(i)
		if i == 0 {
			inner := hi
			hi = func(ctx context.Context, tx pgx.Tx, m *receiver.Message) error {
				close(in0)
				<-release
				return inner(ctx, tx, m)
			}
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			res[i] = process(r, key, pgxinbox.Handler(hi))
		}()
		if i == 0 {
			select {
			case <-in0:
			case <-time.After(30 * time.Second):
				t.Fatal("the first delivery never reached its handler")
			}
			continue
		}
		for deadline := time.Now().Add(30 * time.Second); pgxinbox.Waiting(ib) != i; time.Sleep(time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("delivery %d never queued for the lane", i)
			}
		}
	}
	close(release)
	wg.Wait()
	return res
}

// TestBatchMembers is package inbox's batch table on pgx: one member of a
// five-member batch misbehaves; only its work is undone, or, when the
// shared transaction is lost, every member is requeued; after the
// redeliveries every effect is committed exactly once.
func TestBatchMembers(t *testing.T) {
	f := newFixture(t, 0)
	ib, err := pgxinbox.New(context.Background(), f.pool, inbox.Options{Table: f.table, Lanes: 1, MaxBatch: 63, Linger: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	good := func(ctx context.Context, tx pgx.Tx, m *receiver.Message) error { return f.apply(ctx, tx, m.Key, "ok") }
	type want struct {
		action receiver.Action
		err    error
	}
	ack := want{action: receiver.Ack}
	rq := func(err error) want { return want{receiver.Requeue, err} }
	const n = 5
	cases := []struct {
		name string
		bad  func(ctx context.Context, tx pgx.Tx, m *receiver.Message) error
		want [n]want
	}{
		{"failing member", func(ctx context.Context, tx pgx.Tx, m *receiver.Message) error {
			_ = f.apply(ctx, tx, m.Key, "ok")
			return errHandler
		}, [n]want{ack, ack, rq(errHandler), ack, ack}},
		{"panicking member", func(ctx context.Context, tx pgx.Tx, m *receiver.Message) error {
			_ = f.apply(ctx, tx, m.Key, "ok")
			panic("on purpose")
		}, [n]want{ack, ack, rq(receiver.ErrPanic), ack, ack}},
		{"member returns its statement's error", func(ctx context.Context, tx pgx.Tx, m *receiver.Message) error {
			_ = f.apply(ctx, tx, m.Key, "ok")
			_, err := tx.Exec(ctx, `SELECT 1/0`)
			return err
		}, [n]want{ack, ack, rq(nil), ack, ack}},
		// Swallowing it leaves the shared transaction aborted: the next
		// member's savepoint fails, the batch is lost, member 4 starts anew.
		{"member swallows its statement's error", func(ctx context.Context, tx pgx.Tx, m *receiver.Message) error {
			_ = f.apply(ctx, tx, m.Key, "ok")
			_, _ = tx.Exec(ctx, `SELECT 1/0`)
			return nil
		}, [n]want{rq(inbox.ErrBatchAborted), rq(inbox.ErrBatchAborted), rq(nil), rq(nil), ack}},
		{"member commits the transaction itself", func(ctx context.Context, tx pgx.Tx, m *receiver.Message) error {
			_ = f.apply(ctx, tx, m.Key, "ok")
			return tx.Commit(ctx)
		}, [n]want{rq(inbox.ErrBatchAborted), rq(inbox.ErrBatchAborted), rq(inbox.ErrTxEnded), rq(pgx.ErrTxClosed), ack}},
		{"member rolls the transaction back itself", func(ctx context.Context, tx pgx.Tx, m *receiver.Message) error {
			_ = f.apply(ctx, tx, m.Key, "ok")
			return tx.Rollback(ctx)
		}, [n]want{rq(inbox.ErrBatchAborted), rq(inbox.ErrBatchAborted), rq(inbox.ErrTxEnded), rq(pgx.ErrTxClosed), ack}},
		{"the batch's COMMIT fails", func(ctx context.Context, tx pgx.Tx, m *receiver.Message) error {
			return f.apply(ctx, tx, m.Key, "bad")
		}, [n]want{rq(inbox.ErrCommit), rq(inbox.ErrCommit), rq(inbox.ErrCommit), rq(inbox.ErrCommit), rq(inbox.ErrCommit)}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			keys := make([]string, n)
			for i := range keys {
				keys[i] = fmt.Sprintf("b%d-%s", i, randHex(6))
			}
			r, err := receiver.New(receiver.Config{Selectors: []receiver.Selector{ib}, MaxAttempts: 100})
			if err != nil {
				t.Fatal(err)
			}
			res := runBatch(t, ib, r, keys, func(i int) func(context.Context, pgx.Tx, *receiver.Message) error {
				if i == 2 {
					return c.bad
				}
				return good
			})
			for i, w := range c.want {
				got := res[i]
				if got.Action != w.action || (w.err != nil && !errors.Is(got.Err, w.err)) {
					t.Errorf("member %d: %v (%s, %v); want %v (%v)", i, got.Action, got.Reason, got.Err, w.action, w.err)
				}
				if got.Action == receiver.Ack && !f.recorded(t, keys[i]) {
					t.Errorf("member %d acknowledged but its key is not committed", i)
				}
			}
			if c.name == "member swallows its statement's error" && res[2].Err != nil && errors.Is(res[2].Err, inbox.ErrBatchAborted) {
				t.Errorf("the member that broke the transaction got %v; want its own error", res[2].Err)
			}
			if n := f.pool.Stat().AcquiredConns(); n != 0 {
				t.Errorf("%d connections still acquired: a transaction was left open", n)
			}
			for i, got := range res {
				if got.Action != receiver.Ack {
					if again := process(f.receiver(t), keys[i], pgxinbox.Handler(good)); again.Action != receiver.Ack {
						t.Errorf("member %d redelivered: %v (%s, %v); want an ack", i, again.Action, again.Reason, again.Err)
					}
				}
			}
			for i, key := range keys {
				if got := f.applied(t, key); got != 1 {
					t.Errorf("member %d applied %d times; want once", i, got)
				}
			}
		})
	}
}

// TestBatchConcurrentProcess: 12 goroutines call receiver.Process at once
// on one pgx inbox; the deliveries form batches (fewer COMMITs than
// deliveries) and every effect commits exactly once.
func TestBatchConcurrentProcess(t *testing.T) {
	f := newFixture(t, 0)
	r := f.receiver(t)
	h := pgxinbox.Handler(func(ctx context.Context, tx pgx.Tx, m *receiver.Message) error { return f.apply(ctx, tx, m.Key, "ok") })
	const goroutines, perG = 12, 30
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range perG {
				key := fmt.Sprintf("p-%d-%d", g, i)
				for try := 0; ; try++ {
					res := process(r, key, h)
					if res.Action == receiver.Ack {
						break
					}
					if try == 100 {
						t.Errorf("key %s: not acknowledged: %v %s %v", key, res.Action, res.Reason, res.Err)
						return
					}
				}
			}
		}()
	}
	wg.Wait()
	commits, members := f.ib.Batches()
	t.Logf("%d COMMITs for %d deliveries", commits, members)
	if members != goroutines*perG || commits >= members {
		t.Errorf("%d COMMITs for %d deliveries; want fewer COMMITs than the %d deliveries", commits, members, goroutines*perG)
	}
	for g := range goroutines {
		for i := range perG {
			if n := f.applied(t, fmt.Sprintf("p-%d-%d", g, i)); n != 1 {
				t.Errorf("p-%d-%d applied %d times; want 1", g, i, n)
			}
		}
	}
}

// TestBatchMemberLockWaitTimesOut: a batch member's INSERT waits on the
// unique index for another pool's uncommitted delivery of its key until
// the member's context ends; that member alone is requeued, the member
// before it in the batch commits, the connection survives.
func TestBatchMemberLockWaitTimesOut(t *testing.T) {
	f := newFixture(t, 0)
	ib, err := pgxinbox.New(context.Background(), f.pool, inbox.Options{Table: f.table, Lanes: 1, MaxBatch: 63, Linger: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	k, x := "lw-"+randHex(6), "lx-"+randHex(6)
	apply := func(ctx context.Context, tx pgx.Tx, m *receiver.Message) error { return f.apply(ctx, tx, m.Key, "ok") }
	inA, releaseA := make(chan struct{}), make(chan struct{})
	doneA := make(chan receiver.Result, 1)
	go func() { // another inbox on the pool: another process, as far as the lanes know
		doneA <- process(f.receiver(t), k, pgxinbox.Handler(func(ctx context.Context, tx pgx.Tx, m *receiver.Message) error {
			if err := apply(ctx, tx, m); err != nil {
				return err
			}
			close(inA)
			<-releaseA
			return nil
		}))
	}()
	<-inA
	r, err := receiver.New(receiver.Config{Selectors: []receiver.Selector{ib}})
	if err != nil {
		t.Fatal(err)
	}
	done0, in0 := make(chan receiver.Result, 1), make(chan struct{})
	go func() {
		done0 <- process(r, x, pgxinbox.Handler(func(ctx context.Context, tx pgx.Tx, m *receiver.Message) error {
			close(in0)
			for deadline := time.Now().Add(30 * time.Second); pgxinbox.Waiting(ib) != 1 && time.Now().Before(deadline); {
				time.Sleep(time.Millisecond)
			}
			return apply(ctx, tx, m)
		}))
	}()
	<-in0
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	res1 := r.Process(ctx, &receiver.Message{Key: k, Destination: testQueue}, pgxinbox.Handler(func(context.Context, pgx.Tx, *receiver.Message) error {
		t.Error("the member whose INSERT waited ran its handler")
		return nil
	}))
	cancel()
	if res1.Action != receiver.Requeue {
		t.Errorf("the waiting member: %v (%s, %v); want a requeue", res1.Action, res1.Reason, res1.Err)
	}
	if res0 := <-done0; res0.Action != receiver.Ack || res0.Duplicate || f.applied(t, x) != 1 {
		t.Errorf("the member before it: %v (%s, %v), applied %d; want an ack, committed once", res0.Action, res0.Reason, res0.Err, f.applied(t, x))
	}
	close(releaseA)
	if resA := <-doneA; resA.Action != receiver.Ack || f.applied(t, k) != 1 {
		t.Errorf("the other delivery: %v (%s, %v), applied %d; want an ack, once", resA.Action, resA.Reason, resA.Err, f.applied(t, k))
	}
}

// TestBatchMemberEndsTxWithStatement is package inbox's test of the same
// name on pgx: a handler ends the batch's transaction with a COMMIT or
// ROLLBACK statement and returns nil, in the middle of a five-member batch
// or as its last member. No member up to it is acknowledged (after a
// ROLLBACK its key is not committed, after a COMMIT its redelivery is a
// confirmed duplicate), a later one only with its key committed, and after
// the redeliveries every effect is committed exactly once.
func TestBatchMemberEndsTxWithStatement(t *testing.T) {
	f := newFixture(t, 0)
	ib, err := pgxinbox.New(context.Background(), f.pool, inbox.Options{Table: f.table, Lanes: 1, MaxBatch: 63, Linger: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	good := func(ctx context.Context, tx pgx.Tx, m *receiver.Message) error { return f.apply(ctx, tx, m.Key, "ok") }
	const n = 5
	for _, stmt := range []string{"ROLLBACK", "COMMIT", "ABORT", "END"} {
		for _, culprit := range []int{2, n - 1} {
			t.Run(fmt.Sprintf("%s by member %d", stmt, culprit), func(t *testing.T) {
				keys := make([]string, n)
				for i := range keys {
					keys[i] = fmt.Sprintf("s%d-%s", i, randHex(6))
				}
				r, err := receiver.New(receiver.Config{Selectors: []receiver.Selector{ib}, MaxAttempts: 100})
				if err != nil {
					t.Fatal(err)
				}
				res := runBatch(t, ib, r, keys, func(i int) func(context.Context, pgx.Tx, *receiver.Message) error {
					if i != culprit {
						return good
					}
					return func(ctx context.Context, tx pgx.Tx, m *receiver.Message) error {
						if err := f.apply(ctx, tx, m.Key, "ok"); err != nil {
							return err
						}
						_, err := tx.Exec(ctx, stmt)
						return err
					}
				})
				committed := stmt == "COMMIT" || stmt == "END"
				for i, got := range res {
					if i <= culprit && got.Action == receiver.Ack {
						t.Errorf("member %d acknowledged (%s, duplicate %v); want requeued: the %s ended its batch's transaction", i, got.Reason, got.Duplicate, stmt)
					}
					if got.Action == receiver.Ack && (got.Duplicate || !f.recorded(t, keys[i])) {
						t.Errorf("member %d acknowledged (duplicate %v) without its key committed", i, got.Duplicate)
					}
				}
				if n := f.pool.Stat().AcquiredConns(); n != 0 {
					t.Errorf("%d connections still acquired: a transaction was left open", n)
				}
				for i, got := range res {
					if got.Action == receiver.Ack {
						continue
					}
					again := process(f.receiver(t), keys[i], pgxinbox.Handler(good))
					wantDup := committed && i <= culprit
					if again.Action != receiver.Ack || again.Duplicate != wantDup {
						t.Errorf("member %d redelivered: %v (%s, %v), duplicate %v; want an ack, duplicate %v", i, again.Action, again.Reason, again.Err, again.Duplicate, wantDup)
					}
				}
				for i, key := range keys {
					if got := f.applied(t, key); got != 1 {
						t.Errorf("member %d applied %d times; want once", i, got)
					}
				}
			})
		}
	}
}
