package inboxlane

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/acemq/msgaudit/receiver"
	"pgregory.net/rapid"
)

// fakeDB is a model database: committed keys, and open transactions each
// holding a stack of savepoints over their pending keys.
type fakeDB struct {
	mu        sync.Mutex
	committed map[string]int // key → times committed
	open      map[*fakeTx]bool
	maxOpen   int
	batches   []int // members per successful COMMIT (keys committed)
	failNext  map[string]bool
}

type fakeTx struct {
	db      *fakeDB
	pending [][]string // savepoint frames, innermost last
	poison  bool       // the COMMIT fails
	ended   bool
	gone    bool // a handler's ROLLBACK statement ended it; a later savepoint began another
}

var (
	errEnded  = errors.New("fake: transaction already ended")
	errLocked = errors.New("fake: key locked by another transaction")
	errInsert = errors.New("fake: insert fails on purpose")
	errCommit = errors.New("fake: commit fails on purpose")
)

func newFakeDB() *fakeDB {
	return &fakeDB{committed: map[string]int{}, open: map[*fakeTx]bool{}, failNext: map[string]bool{}}
}

func (d *fakeDB) begin(context.Context) (Tx, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	t := &fakeTx{db: d, pending: [][]string{nil}}
	d.open[t] = true
	d.maxOpen = max(d.maxOpen, len(d.open))
	return t, nil
}

func (t *fakeTx) Insert(_ context.Context, sp bool, ns, key string) (bool, error) {
	d := t.db
	d.mu.Lock()
	defer d.mu.Unlock()
	if t.ended {
		return false, errEnded
	}
	if sp {
		t.pending = append(t.pending, nil)
	}
	if d.failNext[key] {
		delete(d.failNext, key)
		return false, errInsert
	}
	if d.committed[key] > 0 {
		return false, nil
	}
	for o := range d.open {
		for _, f := range o.pending {
			for _, k := range f {
				if k == key {
					if o == t {
						return false, nil // a unique index sees its own transaction's row
					}
					return false, errLocked
				}
			}
		}
	}
	top := len(t.pending) - 1
	t.pending[top] = append(t.pending[top], key)
	return true, nil
}

func (t *fakeTx) RollbackTo(context.Context) error {
	t.db.mu.Lock()
	defer t.db.mu.Unlock()
	if t.ended {
		return errEnded
	}
	if len(t.pending) < 2 {
		return errors.New("fake: no such savepoint")
	}
	t.pending = t.pending[:len(t.pending)-1]
	return nil
}

// rollbackStatement models a handler's ROLLBACK statement, which the
// driver does not see: the pending keys are gone and, as on SQLite, the
// next savepoint begins a new transaction that the COMMIT would commit.
func (t *fakeTx) rollbackStatement() {
	t.db.mu.Lock()
	defer t.db.mu.Unlock()
	t.pending = [][]string{nil}
	t.gone = true
}

func (t *fakeTx) Check(context.Context) error {
	t.db.mu.Lock()
	defer t.db.mu.Unlock()
	if t.ended {
		return errEnded
	}
	if t.gone {
		return errors.New("fake: no such savepoint")
	}
	return nil
}

func (t *fakeTx) Commit(context.Context) error {
	d := t.db
	d.mu.Lock()
	defer d.mu.Unlock()
	if t.ended {
		return errEnded
	}
	t.ended = true
	delete(d.open, t)
	if t.poison {
		return errCommit
	}
	n := 0
	for _, f := range t.pending {
		for _, k := range f {
			d.committed[k]++
			n++
		}
	}
	d.batches = append(d.batches, n)
	return nil
}

func (t *fakeTx) Rollback(context.Context) error {
	t.db.mu.Lock()
	defer t.db.mu.Unlock()
	if t.ended {
		return errEnded
	}
	t.ended = true
	delete(t.db.open, t)
	return nil
}

func (t *fakeTx) Value() any { return t }

type txKey struct{}

func newPool(d *fakeDB, lanes, maxBatch int, linger time.Duration) *Pool {
	return New(Config{
		Lanes: lanes, MaxBatch: maxBatch, Linger: linger, Begin: d.begin,
		WithTx:   func(c context.Context, v any) context.Context { return context.WithValue(c, txKey{}, v) },
		Ended:    func(err error) bool { return errors.Is(err, errEnded) },
		Broken:   func(error) bool { return false },
		Describe: func(op string, err error) error { return fmt.Errorf("%s: %w", op, err) },
	})
}

// outcome of one modelled delivery.
type outcome int

const (
	succeed    outcome = iota
	fail               // the handler fails: Settle(Failed)
	insertFail         // the INSERT fails
	poison             // the handler's work fails the COMMIT
	endTx              // the handler commits the transaction itself
	endSQL             // the handler runs ROLLBACK as a statement
)

// TestPropertyLanes: random deliveries (keys from a small set, so
// duplicates and competing deliveries occur; random outcomes) run by
// concurrent goroutines through a pool of random lanes, MaxBatch and
// Linger, on the model database. Whatever the interleaving:
//
//   - a Settle(Completed) that returned nil: the key is committed;
//   - a Reject: the key was committed before the Select returned;
//   - no key is committed twice; no COMMIT covers more than MaxBatch;
//   - no more transactions are open at once than lanes;
//   - every transaction ends (none left open).
func TestPropertyLanes(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		lanes := rapid.IntRange(1, 3).Draw(rt, "lanes")
		maxBatch := rapid.IntRange(1, 6).Draw(rt, "maxBatch")
		linger := time.Duration(rapid.IntRange(0, 3).Draw(rt, "lingerMs")) * time.Millisecond
		goroutines := rapid.IntRange(1, 6).Draw(rt, "goroutines")
		n := rapid.IntRange(1, 40).Draw(rt, "deliveries")
		type delivery struct {
			key string
			out outcome
		}
		ds := make([]delivery, n)
		for i := range ds {
			ds[i] = delivery{
				key: fmt.Sprintf("k%d", rapid.IntRange(0, 7).Draw(rt, "key")),
				out: outcome(rapid.IntRange(0, 5).Draw(rt, "outcome")),
			}
		}
		d := newFakeDB()
		p := newPool(d, lanes, maxBatch, max(linger, time.Nanosecond))
		var wg sync.WaitGroup
		var mu sync.Mutex
		var problems []string
		report := func(format string, args ...any) {
			mu.Lock()
			problems = append(problems, fmt.Sprintf(format, args...))
			mu.Unlock()
		}
		next := make(chan delivery)
		for range goroutines {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for dl := range next {
					ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
					if dl.out == insertFail {
						d.mu.Lock()
						d.failNext[dl.key] = true
						d.mu.Unlock()
					}
					dec, err := p.Select(ctx, "ns", dl.key)
					if dl.out == insertFail {
						d.mu.Lock()
						delete(d.failNext, dl.key) // not consumed: the delivery took another path
						d.mu.Unlock()
					}
					switch {
					case err != nil:
					case dec.Verdict == receiver.Reject:
						d.mu.Lock()
						c := d.committed[dl.key]
						d.mu.Unlock()
						if c == 0 {
							report("%s rejected as recorded but not committed", dl.key)
						}
					case dec.Verdict == receiver.Accept:
						tx, _ := dec.Context(ctx).Value(txKey{}).(*fakeTx)
						switch dl.out {
						case fail, insertFail:
							_ = dec.Settle(ctx, receiver.Failed)
						default:
							if dl.out == poison {
								d.mu.Lock()
								tx.poison = true
								d.mu.Unlock()
							}
							if dl.out == endTx {
								_ = tx.Rollback(ctx)
							}
							if dl.out == endSQL {
								tx.rollbackStatement()
							}
							if err := dec.Settle(ctx, receiver.Completed); err == nil {
								d.mu.Lock()
								c := d.committed[dl.key]
								d.mu.Unlock()
								if c == 0 {
									report("%s: Settle(Completed) returned nil but the key is not committed", dl.key)
								}
							} else if dl.out == endTx && !errors.Is(err, ErrTxEnded) {
								report("%s ended the transaction; its settlement %v, want ErrTxEnded", dl.key, err)
							} else {
								_ = dec.Settle(ctx, receiver.Failed)
							}
						}
					}
					cancel()
				}
			}()
		}
		for _, dl := range ds {
			next <- dl
		}
		close(next)
		wg.Wait()
		for _, s := range problems {
			rt.Error(s)
		}
		for k, c := range d.committed {
			if c > 1 {
				rt.Errorf("%s committed %d times", k, c)
			}
		}
		for _, b := range d.batches {
			if b > maxBatch {
				rt.Errorf("a COMMIT covered %d members; MaxBatch %d", b, maxBatch)
			}
		}
		if d.maxOpen > lanes {
			rt.Errorf("%d transactions open at once; %d lanes", d.maxOpen, lanes)
		}
		if len(d.open) != 0 {
			rt.Errorf("%d transactions left open", len(d.open))
		}
	})
}

// TestLoneDeliveryCommitsAtOnce: with no delivery waiting, a member's
// Settle commits at once, however long Linger is; a MaxBatch 1 pool never
// opens a savepoint.
func TestLoneDeliveryCommitsAtOnce(t *testing.T) {
	for _, mb := range []int{1, 32} {
		d := newFakeDB()
		p := newPool(d, 1, mb, time.Hour)
		ctx := context.Background()
		for i := range 3 {
			dec, err := p.Select(ctx, "ns", fmt.Sprint("lone", i))
			if err != nil || dec.Verdict != receiver.Accept {
				t.Fatalf("Select: %v %v", dec.Verdict, err)
			}
			done := make(chan error, 1)
			go func() { done <- dec.Settle(ctx, receiver.Completed) }()
			select {
			case err := <-done:
				if err != nil {
					t.Fatal(err)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("a lone delivery's Settle waited for Linger")
			}
		}
		if c, m := p.Stats(); c != 3 || m != 3 {
			t.Errorf("MaxBatch %d: %d COMMITs for %d members; want 3, 3", mb, c, m)
		}
	}
}

// TestWaiterCancelled: a delivery waiting for a lane whose context ends
// gets an error, and a lane handed to it as it gave up is passed on (its
// batch commits): the member before it is not left waiting.
func TestWaiterCancelled(t *testing.T) {
	d := newFakeDB()
	p := newPool(d, 1, 10, time.Hour)
	ctx := context.Background()
	first, err := p.Select(ctx, "ns", "a")
	if err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithCancel(ctx)
	type result struct {
		dec receiver.Decision
		err error
	}
	waited := make(chan result, 1)
	go func() {
		dec, err := p.Select(wctx, "ns", "b")
		waited <- result{dec, err}
	}()
	for p.Waiting() != 1 {
		time.Sleep(time.Millisecond)
	}
	settled := make(chan error, 1)
	go func() { settled <- first.Settle(ctx, receiver.Completed) }()
	cancel()
	if w := <-waited; w.err == nil {
		// It may have won the lane before its context ended; then it
		// holds a member of the first one's batch, which commits once
		// every member is settled.
		t.Log("the waiter got the lane before its context ended")
		if w.dec.Settle != nil {
			go func() { _ = w.dec.Settle(ctx, receiver.Abandoned) }()
		}
	}
	select {
	case err := <-settled:
		if err != nil {
			t.Errorf("first member's settlement: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the first member's batch never committed")
	}
	if d.committed["a"] != 1 {
		t.Errorf("a committed %d times; want 1", d.committed["a"])
	}
}

// TestSetLanes: growing adds free lanes at once; shrinking retires lanes
// as they come free.
func TestSetLanes(t *testing.T) {
	d := newFakeDB()
	p := newPool(d, 1, 1, time.Millisecond)
	p.SetLanes(3)
	ctx := context.Background()
	var decs []receiver.Decision
	for i := range 3 {
		dec, err := p.Select(ctx, "ns", fmt.Sprint("s", i))
		if err != nil {
			t.Fatal(err)
		}
		decs = append(decs, dec)
	}
	if d.maxOpen != 3 {
		t.Errorf("%d transactions open; want 3 lanes in use", d.maxOpen)
	}
	p.SetLanes(1)
	for _, dec := range decs {
		if err := dec.Settle(ctx, receiver.Completed); err != nil {
			t.Fatal(err)
		}
	}
	if p.Lanes() != 1 || len(p.free) != 1 || p.total != 1 {
		t.Errorf("after shrinking: Lanes %d, free %d, total %d; want 1, 1, 1", p.Lanes(), len(p.free), p.total)
	}
}

// step is one delivery of a scripted batch.
type step struct {
	key         string
	settle      receiver.Settlement // of an accepted delivery; 0 means Completed
	poison      bool                // its work fails the COMMIT
	rollbackSQL bool                // its handler runs ROLLBACK as a statement
}

// result is what one scripted delivery got.
type result struct {
	verdict   receiver.Verdict
	selectErr error
	settleErr error
	committed int // its key's COMMITs when its Settle returned
}

// runScript runs steps through one lane of p as one batch, in order:
// step 0 takes the lane, every later step queues for it behind the one
// before, and then each accepted delivery settles as it gets the lane.
// Settle(Completed) runs in its own goroutine (it waits for the COMMIT).
func runScript(t *testing.T, d *fakeDB, p *Pool, steps []step) []result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	type selected struct {
		dec receiver.Decision
		err error
	}
	sel := make([]chan selected, len(steps))
	var first selected
	for i, s := range steps {
		sel[i] = make(chan selected, 1)
		go func() {
			dec, err := p.Select(ctx, "ns", s.key)
			sel[i] <- selected{dec, err}
		}()
		if i == 0 {
			first = <-sel[0] // it holds the lane before the others queue
			continue
		}
		for p.Waiting() != i {
			if ctx.Err() != nil {
				t.Fatalf("delivery %d never queued for the lane", i)
			}
			time.Sleep(time.Millisecond)
		}
	}
	res := make([]result, len(steps))
	var wg sync.WaitGroup
	for i, s := range steps {
		got := first
		if i > 0 {
			select {
			case got = <-sel[i]:
			case <-ctx.Done():
				t.Fatalf("delivery %d never got the lane", i)
			}
		}
		res[i].verdict, res[i].selectErr = got.dec.Verdict, got.err
		if got.err != nil || got.dec.Verdict != receiver.Accept {
			continue
		}
		tx, _ := got.dec.Context(ctx).Value(txKey{}).(*fakeTx)
		if s.poison {
			d.mu.Lock()
			tx.poison = true
			d.mu.Unlock()
		}
		if s.rollbackSQL {
			tx.rollbackStatement()
		}
		st := s.settle
		if st == 0 {
			st = receiver.Completed
		}
		wg.Add(1)
		settled := make(chan struct{})
		go func() {
			defer wg.Done()
			defer close(settled)
			err := got.dec.Settle(ctx, st)
			d.mu.Lock()
			res[i].settleErr, res[i].committed = err, d.committed[s.key]
			d.mu.Unlock()
		}()
		if st != receiver.Completed {
			<-settled // it passes the lane on before it returns
		}
	}
	wg.Wait()
	return res
}

// TestSettleWaitsForCommit: a member's Settle(Completed) returns only
// with its batch's COMMIT outcome. A COMMIT that fails fails every
// member's settlement, the ones that handed the lane on before it ran
// included; one that succeeds has committed the key by the time Settle
// returns nil.
func TestSettleWaitsForCommit(t *testing.T) {
	for _, c := range []struct {
		name  string
		steps []step
		fail  []bool // settlement must fail with ErrCommit
	}{
		{"lone member's COMMIT fails", []step{{key: "a", poison: true}}, []bool{true}},
		{"first of two fails the COMMIT", []step{{key: "a", poison: true}, {key: "b"}}, []bool{true, true}},
		{"last of two fails the COMMIT", []step{{key: "a"}, {key: "b", poison: true}}, []bool{true, true}},
		{"failed member between", []step{{key: "a"}, {key: "b", settle: receiver.Failed}, {key: "c", poison: true}}, []bool{true, false, true}},
		{"COMMIT succeeds", []step{{key: "a"}, {key: "b"}, {key: "c"}}, []bool{false, false, false}},
	} {
		t.Run(c.name, func(t *testing.T) {
			d := newFakeDB()
			p := newPool(d, 1, 10, time.Hour)
			res := runScript(t, d, p, c.steps)
			for i, r := range res {
				s := c.steps[i]
				if r.selectErr != nil || r.verdict != receiver.Accept {
					t.Fatalf("delivery %d: %v %v; want Accept", i, r.verdict, r.selectErr)
				}
				switch {
				case s.settle == receiver.Failed:
					if r.settleErr != nil || r.committed != 0 {
						t.Errorf("delivery %d: Settle(Failed) = %v, key committed %d times; want nil, 0", i, r.settleErr, r.committed)
					}
				case c.fail[i]:
					if !errors.Is(r.settleErr, ErrCommit) {
						t.Errorf("delivery %d: Settle(Completed) = %v; want ErrCommit (the batch's COMMIT failed)", i, r.settleErr)
					}
				default:
					if r.settleErr != nil || r.committed != 1 {
						t.Errorf("delivery %d: Settle(Completed) = %v with the key committed %d times; want nil after its COMMIT", i, r.settleErr, r.committed)
					}
				}
			}
			if c, m := p.Stats(); c != 1 {
				t.Errorf("%d COMMITs (%d members); want the batch's one", c, m)
			}
		})
	}
}

// TestSameKeyInOpenBatchDeferred: a delivery of a key whose first
// delivery is in the lane's open batch is deferred (its outcome is known
// only at the COMMIT), never accepted or rejected as recorded; once that
// first delivery failed and was rolled back, the key is new again.
func TestSameKeyInOpenBatchDeferred(t *testing.T) {
	acc, def := receiver.Accept, receiver.Defer
	for _, c := range []struct {
		name  string
		steps []step
		want  []receiver.Verdict
	}{
		{"right after", []step{{key: "k"}, {key: "k"}}, []receiver.Verdict{acc, def}},
		{"another key between", []step{{key: "k"}, {key: "x"}, {key: "k"}}, []receiver.Verdict{acc, acc, def}},
		{"twice after", []step{{key: "k"}, {key: "k"}, {key: "k"}}, []receiver.Verdict{acc, def, def}},
		{"later member's key", []step{{key: "x"}, {key: "k"}, {key: "k"}}, []receiver.Verdict{acc, acc, def}},
		{"first member failed", []step{{key: "k", settle: receiver.Failed}, {key: "k"}}, []receiver.Verdict{acc, acc}},
		{"later member failed", []step{{key: "x"}, {key: "k", settle: receiver.Failed}, {key: "k"}}, []receiver.Verdict{acc, acc, acc}},
	} {
		t.Run(c.name, func(t *testing.T) {
			d := newFakeDB()
			p := newPool(d, 1, 10, time.Hour)
			res := runScript(t, d, p, c.steps)
			for i, r := range res {
				if r.selectErr != nil || r.verdict != c.want[i] {
					t.Errorf("delivery %d of %q: %v %v; want %v", i, c.steps[i].key, r.verdict, r.selectErr, c.want[i])
				}
				if r.verdict == receiver.Accept && c.steps[i].settle == 0 && r.settleErr != nil {
					t.Errorf("delivery %d: Settle(Completed) = %v", i, r.settleErr)
				}
			}
			for k, n := range d.committed {
				if n != 1 {
					t.Errorf("%s committed %d times", k, n)
				}
			}
		})
	}
}

// TestCommitCheck: when a handler ended the lane's transaction with a
// ROLLBACK statement (which the driver does not see), the lane's check
// before the COMMIT fails: it rolls back instead, and every member's
// settlement fails with ErrAborted, the members after the statement (in
// the transaction SQLite's SAVEPOINT began) included. Nothing is
// committed.
func TestCommitCheck(t *testing.T) {
	for _, c := range []struct {
		name  string
		steps []step
	}{
		{"lone member", []step{{key: "a", rollbackSQL: true}}},
		{"last member", []step{{key: "a"}, {key: "b"}, {key: "c", rollbackSQL: true}}},
		{"middle member", []step{{key: "a"}, {key: "b", rollbackSQL: true}, {key: "c"}, {key: "d"}}},
		{"first member", []step{{key: "a", rollbackSQL: true}, {key: "b"}}},
	} {
		t.Run(c.name, func(t *testing.T) {
			d := newFakeDB()
			p := newPool(d, 1, 10, time.Hour)
			res := runScript(t, d, p, c.steps)
			for i, r := range res {
				if r.selectErr != nil || r.verdict != receiver.Accept {
					t.Fatalf("delivery %d: %v %v; want Accept", i, r.verdict, r.selectErr)
				}
				if !errors.Is(r.settleErr, ErrAborted) {
					t.Errorf("delivery %d: Settle(Completed) = %v; want ErrAborted", i, r.settleErr)
				}
			}
			if len(d.committed) != 0 || len(d.open) != 0 {
				t.Errorf("committed %v, %d transactions open; want nothing committed, none open", d.committed, len(d.open))
			}
		})
	}
}
