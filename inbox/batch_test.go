package inbox_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/acemq/msgaudit/inbox"
	"github.com/acemq/msgaudit/receiver"
)

// waitFor polls cond every millisecond for up to 30 s.
func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// runBatch delivers keys through r so that they form one batch in ib's
// single lane, in order: keys[0] takes the lane and waits in its handler
// until every other delivery waits for the lane, each queued after the
// one before. h(i) is key i's handler. It returns the results by index.
func runBatch(t *testing.T, ib *inbox.Inbox, r *receiver.Receiver, keys []string,
	h func(i int) func(ctx context.Context, tx *sql.Tx, m *receiver.Message) error) []receiver.Result {
	t.Helper()
	res := make([]receiver.Result, len(keys))
	var wg sync.WaitGroup
	in0, release := make(chan struct{}), make(chan struct{})
	for i, key := range keys {
		hi := h(i)
		if i == 0 {
			inner := hi
			hi = func(ctx context.Context, tx *sql.Tx, m *receiver.Message) error {
				close(in0)
				<-release
				return inner(ctx, tx, m)
			}
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			res[i] = process(t, r, msg(key), inbox.Handler(hi))
		}()
		if i == 0 {
			select {
			case <-in0:
			case <-time.After(30 * time.Second):
				t.Fatal("the first delivery never reached its handler")
			}
			continue
		}
		waitFor(t, fmt.Sprintf("delivery %d to wait for the lane", i), func() bool { return inbox.Waiting(ib) == i })
	}
	close(release)
	wg.Wait()
	return res
}

// TestBatchMembers: deliveries that share one lane's transaction, one of
// them failing in some way, on SQLite and PostgreSQL. Only the failing
// member's work is undone and retried (or, when the shared transaction
// itself is lost, every member is requeued and nothing is acknowledged
// before a COMMIT covered it); after the retries every key's effect is
// committed exactly once.
func TestBatchMembers(t *testing.T) {
	type want struct {
		action receiver.Action
		err    error // errors.Is of Result.Err, when non-nil
		dup    bool
	}
	ack := want{action: receiver.Ack}
	const n = 5
	cases := []struct {
		name string
		// bad is the member's handler (or nil: apply the effect).
		bad      func(b *backend) func(ctx context.Context, tx *sql.Tx, m *receiver.Message) error
		recorded bool // the bad member's key is recorded beforehand
		want     [n]want
		commits  uint64 // COMMITs the batch took
	}{
		{
			name: "failing member",
			bad: func(b *backend) func(context.Context, *sql.Tx, *receiver.Message) error {
				return func(ctx context.Context, tx *sql.Tx, m *receiver.Message) error {
					if err := b.apply(ctx, tx, m.Key, "ok"); err != nil {
						return err
					}
					return errHandler
				}
			},
			want:    [n]want{ack, ack, {action: receiver.Requeue, err: errHandler}, ack, ack},
			commits: 1,
		},
		{
			name: "panicking member",
			bad: func(b *backend) func(context.Context, *sql.Tx, *receiver.Message) error {
				return func(ctx context.Context, tx *sql.Tx, m *receiver.Message) error {
					if err := b.apply(ctx, tx, m.Key, "ok"); err != nil {
						return err
					}
					panic("member panics on purpose")
				}
			},
			want:    [n]want{ack, ack, {action: receiver.Requeue, err: receiver.ErrPanic}, ack, ack},
			commits: 1,
		},
		{
			name:     "member already recorded",
			recorded: true,
			want:     [n]want{ack, ack, {action: receiver.Ack, dup: true}, ack, ack},
			commits:  1,
		},
		{
			name: "member whose statement fails",
			bad: func(b *backend) func(context.Context, *sql.Tx, *receiver.Message) error {
				return func(ctx context.Context, tx *sql.Tx, m *receiver.Message) error {
					if err := b.apply(ctx, tx, m.Key, "ok"); err != nil {
						return err
					}
					_, err := tx.ExecContext(ctx, `INSERT INTO no_such_table_`+randHex(4)+` VALUES (1)`)
					return err
				}
			},
			want:    [n]want{ack, ack, {action: receiver.Requeue}, ack, ack},
			commits: 1,
		},
		{
			// Its Commit covers members 0 and 1, which are requeued all the
			// same (their redelivery finds their keys); member 3 finds the
			// transaction gone; member 4 starts a new batch.
			name: "member commits the transaction itself",
			bad: func(b *backend) func(context.Context, *sql.Tx, *receiver.Message) error {
				return func(ctx context.Context, tx *sql.Tx, m *receiver.Message) error {
					if err := b.apply(ctx, tx, m.Key, "ok"); err != nil {
						return err
					}
					return tx.Commit()
				}
			},
			want: [n]want{{action: receiver.Requeue, err: inbox.ErrBatchAborted}, {action: receiver.Requeue, err: inbox.ErrBatchAborted},
				{action: receiver.Requeue, err: inbox.ErrTxEnded}, {action: receiver.Requeue, err: sql.ErrTxDone}, ack},
			commits: 1, // member 4's
		},
		{
			name: "member rolls the transaction back itself",
			bad: func(b *backend) func(context.Context, *sql.Tx, *receiver.Message) error {
				return func(ctx context.Context, tx *sql.Tx, m *receiver.Message) error {
					if err := b.apply(ctx, tx, m.Key, "ok"); err != nil {
						return err
					}
					return tx.Rollback()
				}
			},
			want: [n]want{{action: receiver.Requeue, err: inbox.ErrBatchAborted}, {action: receiver.Requeue, err: inbox.ErrBatchAborted},
				{action: receiver.Requeue, err: inbox.ErrTxEnded}, {action: receiver.Requeue, err: sql.ErrTxDone}, ack},
			commits: 1,
		},
		{
			// A deferred foreign key the member's effect violates fails the
			// batch's COMMIT: every member is requeued, none acknowledged.
			name: "the batch's COMMIT fails",
			bad: func(b *backend) func(context.Context, *sql.Tx, *receiver.Message) error {
				return func(ctx context.Context, tx *sql.Tx, m *receiver.Message) error {
					return b.apply(ctx, tx, m.Key, "bad")
				}
			},
			want: [n]want{{action: receiver.Requeue, err: inbox.ErrCommit}, {action: receiver.Requeue, err: inbox.ErrCommit},
				{action: receiver.Requeue, err: inbox.ErrCommit}, {action: receiver.Requeue, err: inbox.ErrCommit}, {action: receiver.Requeue, err: inbox.ErrCommit}},
			commits: 1,
		},
	}
	forEachBackend(t, func(t *testing.T, newBackend func(t testing.TB) *backend) {
		b := newBackend(t)
		ib := b.newInbox(t, inbox.Options{Lanes: 1, MaxBatch: 63, Linger: time.Minute})
		good := func(ctx context.Context, tx *sql.Tx, m *receiver.Message) error { return b.apply(ctx, tx, m.Key, "ok") }
		for _, c := range cases {
			t.Run(c.name, func(t *testing.T) {
				keys := make([]string, n)
				for i := range keys {
					keys[i] = fmt.Sprintf("b%d-%s", i, randHex(6))
				}
				r := newReceiver(t, ib, nil)
				if c.recorded {
					if res := process(t, newReceiver(t, ib, nil), msg(keys[2]), inbox.Handler(good)); res.Action != receiver.Ack {
						t.Fatalf("recording %s: %v %s %v", keys[2], res.Action, res.Reason, res.Err)
					}
				}
				commits0, _ := ib.Batches()
				ran := make([]bool, n)
				res := runBatch(t, ib, r, keys, func(i int) func(context.Context, *sql.Tx, *receiver.Message) error {
					h := good
					if i == 2 && c.bad != nil {
						h = c.bad(b)
					}
					return func(ctx context.Context, tx *sql.Tx, m *receiver.Message) error {
						ran[i] = true
						return h(ctx, tx, m)
					}
				})
				for i, w := range c.want {
					got := res[i]
					if got.Action != w.action || (w.err != nil && !errors.Is(got.Err, w.err)) || got.Duplicate != w.dup {
						t.Errorf("member %d: %v (%s, %v), duplicate %v; want %v (%v), duplicate %v",
							i, got.Action, got.Reason, got.Err, got.Duplicate, w.action, w.err, w.dup)
					}
					if got.Action == receiver.Ack && !got.Duplicate && !contains(t, ib, keys[i]) {
						t.Errorf("member %d acknowledged but its key is not committed", i)
					}
				}
				if c.recorded && ran[2] {
					t.Error("the recorded member's handler ran")
				}
				if commits, _ := ib.Batches(); commits-commits0 != c.commits {
					t.Errorf("%d COMMITs; want %d", commits-commits0, c.commits)
				}
				// Redeliver what was not acknowledged (a fresh receiver: the
				// transport's redelivery), with the good handler.
				for i, got := range res {
					if got.Action == receiver.Ack {
						continue
					}
					if again := process(t, newReceiver(t, ib, nil), msg(keys[i]), inbox.Handler(good)); again.Action != receiver.Ack {
						t.Errorf("member %d redelivered: %v (%s, %v); want an ack", i, again.Action, again.Reason, again.Err)
					}
				}
				for i, key := range keys {
					if got := b.applied(t, key); got != 1 {
						t.Errorf("member %d's effect committed %d times; want once", i, got)
					}
					if !contains(t, ib, key) {
						t.Errorf("member %d's key is not recorded", i)
					}
				}
			})
		}
	})
}

// TestBatchConcurrentProcess: many goroutines call receiver.Process at
// once on one inbox (distinct keys, some delivered twice); their
// deliveries form batches (fewer COMMITs than deliveries) and every key's
// effect commits exactly once, each first delivery acknowledged as new
// work.
func TestBatchConcurrentProcess(t *testing.T) {
	forEachBackend(t, func(t *testing.T, newBackend func(t testing.TB) *backend) {
		b := newBackend(t)
		lanes := 1
		if b.dialect != inbox.SQLite {
			lanes = 3
		}
		ib := b.newInbox(t, inbox.Options{Lanes: lanes})
		r := newReceiver(t, ib, nil)
		const goroutines, perG = 12, 40
		var wg sync.WaitGroup
		var mu sync.Mutex
		acked := map[string]int{}
		h := inbox.Handler(func(ctx context.Context, tx *sql.Tx, m *receiver.Message) error {
			return b.apply(ctx, tx, m.Key, "ok")
		})
		for g := range goroutines {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range perG {
					// Goroutines g and g+1 share half their keys.
					key := fmt.Sprintf("p-%d-%d", g, i)
					if i%2 == 1 {
						key = fmt.Sprintf("p-%d-%d", (g+1)%goroutines, i-1)
					}
					for try := 0; ; try++ {
						res := process(t, r, msg(key), h)
						if res.Action == receiver.Ack {
							if !res.Duplicate {
								mu.Lock()
								acked[key]++
								mu.Unlock()
							}
							break
						}
						if try == 200 {
							t.Errorf("key %s: not acknowledged after %d tries: %v %s %v", key, try+1, res.Action, res.Reason, res.Err)
							return
						}
					}
				}
			}()
		}
		wg.Wait()
		commits, members := ib.Batches()
		t.Logf("%s: %d COMMITs for %d deliveries (%.1f a batch)", b.name, commits, members, float64(members)/float64(commits))
		if members != uint64(len(acked)) {
			t.Errorf("COMMITs covered %d deliveries; want %d (one per key)", members, len(acked))
		}
		if commits >= members {
			t.Errorf("%d COMMITs for %d deliveries: no batch formed", commits, members)
		}
		for key, n := range acked {
			if n != 1 {
				t.Errorf("key %s acknowledged as new %d times", key, n)
			}
			if got := b.applied(t, key); got != 1 {
				t.Errorf("key %s applied %d times; want 1", key, got)
			}
		}
		if len(acked) != goroutines*perG/2 {
			t.Errorf("%d keys acknowledged; want %d", len(acked), goroutines*perG/2)
		}
	})
}

// TestBatchMemberEndsTxWithStatement: a handler that ends the batch's
// shared transaction with a COMMIT or ROLLBACK statement (which the
// driver does not see) and returns nil, in the middle of a batch or as its
// last member, on SQLite and PostgreSQL. The inbox finds its transaction
// gone at the COMMIT: the members up to that handler are requeued, never
// acknowledged (a ROLLBACK undid their keys and effects; a COMMIT
// committed them, so their redelivery is a confirmed duplicate); a later
// member is acknowledged only with its key committed (on SQLite it ran in
// the transaction the next SAVEPOINT began, which is rolled back). After
// the redeliveries every effect is committed exactly once.
func TestBatchMemberEndsTxWithStatement(t *testing.T) {
	const n = 5
	forEachBackend(t, func(t *testing.T, newBackend func(t testing.TB) *backend) {
		b := newBackend(t)
		ib := b.newInbox(t, inbox.Options{Lanes: 1, MaxBatch: 63, Linger: time.Minute})
		good := func(ctx context.Context, tx *sql.Tx, m *receiver.Message) error { return b.apply(ctx, tx, m.Key, "ok") }
		for _, stmt := range []string{"ROLLBACK", "COMMIT"} {
			for _, culprit := range []int{2, n - 1} {
				t.Run(fmt.Sprintf("%s by member %d", stmt, culprit), func(t *testing.T) {
					keys := make([]string, n)
					for i := range keys {
						keys[i] = fmt.Sprintf("s%d-%s", i, randHex(6))
					}
					res := runBatch(t, ib, newReceiver(t, ib, nil), keys, func(i int) func(context.Context, *sql.Tx, *receiver.Message) error {
						if i != culprit {
							return good
						}
						return func(ctx context.Context, tx *sql.Tx, m *receiver.Message) error {
							if err := b.apply(ctx, tx, m.Key, "ok"); err != nil {
								return err
							}
							_, err := tx.ExecContext(ctx, stmt)
							return err
						}
					})
					for i, got := range res {
						if i <= culprit && got.Action == receiver.Ack {
							t.Errorf("member %d acknowledged (%s, duplicate %v); want requeued: the %s ended its batch's transaction", i, got.Reason, got.Duplicate, stmt)
						}
						if got.Action == receiver.Ack && (got.Duplicate || !contains(t, ib, keys[i])) {
							t.Errorf("member %d acknowledged (duplicate %v) without its key committed", i, got.Duplicate)
						}
					}
					for i, got := range res {
						if got.Action == receiver.Ack {
							continue
						}
						again := process(t, newReceiver(t, ib, nil), msg(keys[i]), inbox.Handler(good))
						wantDup := stmt == "COMMIT" && i <= culprit
						if again.Action != receiver.Ack || again.Duplicate != wantDup {
							t.Errorf("member %d redelivered: %v (%s, %v), duplicate %v; want an ack, duplicate %v", i, again.Action, again.Reason, again.Err, again.Duplicate, wantDup)
						}
					}
					for i, key := range keys {
						if got := b.applied(t, key); got != 1 {
							t.Errorf("member %d's effect committed %d times; want once", i, got)
						}
						if !contains(t, ib, key) {
							t.Errorf("member %d's key is not recorded", i)
						}
					}
				})
			}
		}
	})
}

// TestBatchMemberLockWaitTimesOut: a batch member's INSERT waits on the
// unique index for another process's uncommitted delivery of its key
// until the member's context ends. That member alone is requeued (its
// savepoint rolled back); the member before it in the batch commits and
// is acknowledged, and the other process's delivery commits too. The
// wait is cancelled on the server, on the statement alone
// (pg_cancel_backend on PostgreSQL, KILL QUERY on MySQL): cancelling it
// by closing the connection would roll the whole batch back and requeue
// the member before it.
func TestBatchMemberLockWaitTimesOut(t *testing.T) {
	for _, d := range []struct {
		name string
		new  func(t testing.TB) *backend
	}{
		{"postgres", func(t testing.TB) *backend { return newPostgres(t, false) }},
		{"mysql", newMySQL},
	} {
		t.Run(d.name, func(t *testing.T) { testBatchMemberLockWaitTimesOut(t, d.new(t)) })
	}
}

func testBatchMemberLockWaitTimesOut(t *testing.T, b *backend) {
	other := b.newInbox(t, inbox.Options{})
	ib, err := inbox.New(context.Background(), b.open(t), inbox.Options{Dialect: b.dialect, Table: b.table, Lanes: 1, MaxBatch: 63, Linger: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	k, x := "lw-"+randHex(6), "lx-"+randHex(6)
	apply := func(ctx context.Context, tx *sql.Tx, m *receiver.Message) error { return b.apply(ctx, tx, m.Key, "ok") }
	inA, releaseA := make(chan struct{}), make(chan struct{})
	doneA := make(chan receiver.Result, 1)
	go func() {
		doneA <- process(t, newReceiver(t, other, nil), msg(k), inbox.Handler(func(ctx context.Context, tx *sql.Tx, m *receiver.Message) error {
			if err := apply(ctx, tx, m); err != nil {
				return err
			}
			close(inA)
			<-releaseA
			return nil
		}))
	}()
	<-inA
	r := newReceiver(t, ib, nil)
	done0, in0 := make(chan receiver.Result, 1), make(chan struct{})
	go func() {
		done0 <- process(t, r, msg(x), inbox.Handler(func(ctx context.Context, tx *sql.Tx, m *receiver.Message) error {
			close(in0)
			for deadline := time.Now().Add(30 * time.Second); inbox.Waiting(ib) != 1 && time.Now().Before(deadline); {
				time.Sleep(time.Millisecond)
			}
			return apply(ctx, tx, m)
		}))
	}()
	<-in0 // the member before holds the lane
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	res1 := r.Process(ctx, msg(k), inbox.Handler(func(context.Context, *sql.Tx, *receiver.Message) error {
		t.Error("the member whose INSERT waited ran its handler")
		return nil
	}))
	cancel()
	if res1.Action != receiver.Requeue || !errors.Is(res1.Err, context.DeadlineExceeded) {
		t.Errorf("the waiting member: %v (%s, %v); want a requeue at its deadline", res1.Action, res1.Reason, res1.Err)
	}
	if res0 := <-done0; res0.Action != receiver.Ack || res0.Duplicate {
		t.Errorf("the member before it: %v (%s, %v); want an ack of new work", res0.Action, res0.Reason, res0.Err)
	}
	if !contains(t, ib, x) || b.applied(t, x) != 1 {
		t.Errorf("the member before it: recorded %v, applied %d; want committed once", contains(t, ib, x), b.applied(t, x))
	}
	close(releaseA)
	if resA := <-doneA; resA.Action != receiver.Ack {
		t.Errorf("the other process's delivery: %v (%s, %v); want an ack", resA.Action, resA.Reason, resA.Err)
	}
	if n := b.applied(t, k); n != 1 {
		t.Errorf("%s applied %d times; want once", k, n)
	}
}
