package storetest

import (
	"context"
	"errors"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/acemq/msgaudit/idempotency"
	"github.com/acemq/msgaudit/internal/claimkit"
	"github.com/acemq/msgaudit/internal/testkit/testwait"
)

// batchCase is one case of the batch contract.
type batchCase struct {
	name string
	fn   func(*testing.T)
	na   string
}

// batchCases are the cases of the idempotency.BatchStore contract. Run
// includes them when the store under test is a BatchStore; RunBatch runs
// them alone.
func (s *suite) batchCases() []batchCase {
	return []batchCase{
		{"Batch/Model", s.testBatchModel, ""},
		{"Batch/DuplicateKeys", s.testBatchDuplicates, ""},
		{"Batch/InvalidKey", s.testBatchInvalidKey, ""},
		{"Batch/ClaimLost", s.testBatchClaimLost, ""},
		{"Batch/Empty", s.testBatchEmpty, ""},
		{"Batch/Lengths", s.testBatchLengths, ""},
		{"Batch/Expiry/TakeOver", s.testBatchTakeOver, ""},
		{"Batch/Expiry/RetentionForgets", s.testBatchRetention, ""},
		{"Batch/Large", s.testBatchLarge, ""},
		{"Batch/Race", s.testBatchRace, ""},
		{"Batch/Concurrent", s.testBatchConcurrent, ""},
		{"Batch/Context/Cancelled", s.testBatchCancelled, ""},
		{"Batch/Closed", s.testBatchClosed, ""},
		{"Batch/Fault/Unreachable", s.testBatchUnreachable, notIf(s.caps.Unreachable == nil, "it has no server (Capabilities.Unreachable is nil)")},
	}
}

// RunBatch runs only the batch cases of the suite (the ones Run adds for a
// store that implements idempotency.BatchStore). Every store open returns
// must implement idempotency.BatchStore; the cases fail otherwise.
func RunBatch(t *testing.T, open func(t *testing.T, o idempotency.Options) idempotency.Store, caps Capabilities) {
	if caps.ShortTTL <= 0 {
		caps.ShortTTL = 300 * time.Millisecond
	}
	s := &suite{open: open, caps: caps}
	s.runBatch(t)
}

func (s *suite) runBatch(t *testing.T) {
	for _, c := range s.batchCases() {
		if c.na != "" {
			t.Logf("%s does not apply to this store: %s", c.name, c.na)
			continue
		}
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			c.fn(t)
		})
	}
}

// isBatchStore opens one store to see whether the backend implements
// idempotency.BatchStore.
func (s *suite) isBatchStore(t *testing.T) bool {
	t.Helper()
	st := s.open(t, idempotency.Options{ClaimTTL: longTTL, Retention: longRetention})
	_, ok := st.(idempotency.BatchStore)
	_ = st.Close()
	return ok
}

// batch returns the env's store as a BatchStore, failing the test when it
// is not one.
func (e *env) batch() idempotency.BatchStore {
	e.t.Helper()
	b, ok := e.s.(idempotency.BatchStore)
	if !ok {
		e.t.Fatalf("store %T does not implement idempotency.BatchStore", e.s)
	}
	return b
}

// tryClaimBatch calls TryClaimBatch, failing the test on a whole-batch
// error.
func (e *env) tryClaimBatch(keys ...idempotency.Key) []idempotency.ClaimResult {
	e.t.Helper()
	res := make([]idempotency.ClaimResult, len(keys))
	if err := e.batch().TryClaimBatch(e.ctx, keys, res); err != nil {
		e.t.Fatalf("TryClaimBatch of %d keys: %v", len(keys), err)
	}
	return res
}

// settleBatch calls ConfirmBatch (confirm) or ReleaseBatch, failing the
// test on a whole-batch error.
func (e *env) settleBatch(confirm bool, claims ...idempotency.Claim) []error {
	e.t.Helper()
	errs := make([]error, len(claims))
	b := e.batch()
	op, f := "ReleaseBatch", b.ReleaseBatch
	if confirm {
		op, f = "ConfirmBatch", b.ConfirmBatch
	}
	if err := f(e.ctx, claims, errs); err != nil {
		e.t.Fatalf("%s of %d claims: %v", op, len(claims), err)
	}
	return errs
}

// wantResult fails unless r is outcome want (a valid claim on k for
// Claimed, a zero claim otherwise) or, for want 0, the error wantErr.
func (e *env) wantResult(i int, r idempotency.ClaimResult, k idempotency.Key, want idempotency.Outcome, wantErr error, start time.Time) {
	e.t.Helper()
	if wantErr != nil {
		if !errors.Is(r.Err, wantErr) || r.Outcome != 0 || r.Claim != (idempotency.Claim{}) {
			e.t.Fatalf("result %d (%.40q) = %v, %+v, %v; want %v and zero values", i, k.ID, r.Outcome, r.Claim, r.Err, wantErr)
		}
		return
	}
	if r.Err != nil || r.Outcome != want {
		e.t.Fatalf("result %d (%.40q) = %v, %v; want %v", i, k.ID, r.Outcome, r.Err, want)
	}
	if want == idempotency.Claimed {
		e.checkClaim(r.Claim, k, start)
	} else if r.Claim != (idempotency.Claim{}) {
		e.t.Fatalf("result %d (%.40q) = %v with a non-zero claim %+v", i, k.ID, r.Outcome, r.Claim)
	}
}

// wantErrs fails unless errs[i] matches want[i] (nil meaning success).
func wantErrs(t *testing.T, op string, errs, want []error) {
	t.Helper()
	for i := range want {
		expectErr(t, op+" entry "+itoa(i), errs[i], want[i])
	}
}

// testBatchDuplicates: a key repeated inside one batch is answered as a
// sequence of single calls would be: the first occurrence claims, later
// ones see InProgress, a key confirmed or held before the batch keeps its
// answer at every occurrence; a claim confirmed or released twice in one
// batch succeeds once and is lost the second time.
func (s *suite) testBatchDuplicates(t *testing.T) {
	e := s.newEnv(t, longTTL, longRetention)
	a, b := e.key("a"), e.key("b")
	start := time.Now()
	res := e.tryClaimBatch(a, a, b, a, b)
	e.wantResult(0, res[0], a, idempotency.Claimed, nil, start)
	e.wantResult(1, res[1], a, idempotency.InProgress, nil, start)
	e.wantResult(2, res[2], b, idempotency.Claimed, nil, start)
	e.wantResult(3, res[3], a, idempotency.InProgress, nil, start)
	e.wantResult(4, res[4], b, idempotency.InProgress, nil, start)
	ca, cb := res[0].Claim, res[2].Claim
	if ca.Token == cb.Token {
		t.Fatalf("two claims of one batch share the token %q", ca.Token)
	}
	wantErrs(t, "ConfirmBatch", e.settleBatch(true, ca, ca), []error{nil, idempotency.ErrClaimLost})
	res = e.tryClaimBatch(a, b)
	e.wantResult(0, res[0], a, idempotency.AlreadyConfirmed, nil, start)
	e.wantResult(1, res[1], b, idempotency.InProgress, nil, start)
	wantErrs(t, "ReleaseBatch", e.settleBatch(false, cb, cb), []error{nil, idempotency.ErrClaimLost})
	// Released, then claimed again within one batch; the confirm of a
	// released claim in the same batch is lost.
	wantErrs(t, "ConfirmBatch after release", e.settleBatch(true, cb), []error{idempotency.ErrClaimLost})
	e.isConfirmed(b, false)
	res = e.tryClaimBatch(b, a, b)
	e.wantResult(0, res[0], b, idempotency.Claimed, nil, start)
	e.wantResult(1, res[1], a, idempotency.AlreadyConfirmed, nil, start)
	e.wantResult(2, res[2], b, idempotency.InProgress, nil, start)
	if res[0].Claim.Token == cb.Token {
		t.Fatalf("a new claim reused token %q", cb.Token)
	}
	// A claim from a batch works with the single-key calls.
	expectErr(t, "Confirm", e.s.Confirm(e.ctx, res[0].Claim), nil)
	e.isConfirmed(b, true)

	// Keys confirmed or held before the batch, repeated around a new key
	// and an invalid one, keep their answers; a claim repeated among a
	// tokenless and a forged claim of the same keys confirms once.
	done, held, fresh, x := e.key("done"), e.key("held"), e.key("fresh"), e.key("x")
	expectErr(t, "Confirm done", e.s.Confirm(e.ctx, e.tryClaim(done, idempotency.Claimed)), nil)
	e.tryClaim(held, idempotency.Claimed)
	bad := idempotency.Key{Namespace: e.ns}
	start = time.Now()
	res = e.tryClaimBatch(fresh, done, fresh, held, bad, done, held, fresh)
	for i, w := range []struct {
		k   idempotency.Key
		o   idempotency.Outcome
		err error
	}{
		{fresh, idempotency.Claimed, nil}, {done, idempotency.AlreadyConfirmed, nil},
		{fresh, idempotency.InProgress, nil}, {held, idempotency.InProgress, nil},
		{bad, 0, idempotency.ErrInvalidKey}, {done, idempotency.AlreadyConfirmed, nil},
		{held, idempotency.InProgress, nil}, {fresh, idempotency.InProgress, nil},
	} {
		e.wantResult(i, res[i], w.k, w.o, w.err, start)
	}
	c := res[0].Claim
	wantErrs(t, "ConfirmBatch with repeats", e.settleBatch(true, c, c, idempotency.Claim{Key: x}, idempotency.Claim{Key: fresh, Token: claimkit.NewToken()}),
		[]error{nil, idempotency.ErrClaimLost, idempotency.ErrClaimLost, idempotency.ErrClaimLost})
	e.isConfirmed(fresh, true)
	e.isConfirmed(x, false)
}

// testBatchInvalidKey: an invalid key fails only its own entry; the
// others are answered and take effect.
func (s *suite) testBatchInvalidKey(t *testing.T) {
	e := s.newEnv(t, longTTL, longRetention)
	g1, g2 := e.key("good1"), e.key("good2")
	bad1, bad2 := idempotency.Key{}, idempotency.Key{Namespace: e.ns}
	start := time.Now()
	res := e.tryClaimBatch(g1, bad1, bad2, g2)
	e.wantResult(0, res[0], g1, idempotency.Claimed, nil, start)
	e.wantResult(1, res[1], bad1, 0, idempotency.ErrInvalidKey, start)
	e.wantResult(2, res[2], bad2, 0, idempotency.ErrInvalidKey, start)
	e.wantResult(3, res[3], g2, idempotency.Claimed, nil, start)
	c1, c2 := res[0].Claim, res[3].Claim
	badClaim := idempotency.Claim{Key: bad2, Token: c1.Token, Expires: c1.Expires}
	wantErrs(t, "ConfirmBatch", e.settleBatch(true, badClaim, c1),
		[]error{idempotency.ErrInvalidKey, nil})
	wantErrs(t, "ReleaseBatch", e.settleBatch(false, c2, idempotency.Claim{Token: c2.Token}),
		[]error{nil, idempotency.ErrInvalidKey})
	e.isConfirmed(g1, true)
	e.isConfirmed(g2, false)
	e.tryClaim(g2, idempotency.Claimed)
}

// testBatchClaimLost: a claim that is no longer held (released, confirmed,
// forged, another key's) gets ErrClaimLost in its own entry and changes
// nothing; the other entries of the batch take effect.
func (s *suite) testBatchClaimLost(t *testing.T) {
	e := s.newEnv(t, longTTL, longRetention)
	k1, k2, k3, k4 := e.key("m1"), e.key("m2"), e.key("m3"), e.key("m4")
	c1 := e.tryClaim(k1, idempotency.Claimed)
	c2 := e.tryClaim(k2, idempotency.Claimed)
	c3 := e.tryClaim(k3, idempotency.Claimed)
	c4 := e.tryClaim(k4, idempotency.Claimed)
	expectErr(t, "Release m2", e.s.Release(e.ctx, c2), nil)
	forged := idempotency.Claim{Key: k4, Token: claimkit.NewToken(), Expires: c4.Expires}
	foreign := idempotency.Claim{Key: k4, Token: c3.Token, Expires: c4.Expires}
	wantErrs(t, "ConfirmBatch", e.settleBatch(true, c1, c2, forged, c3, foreign),
		[]error{nil, idempotency.ErrClaimLost, idempotency.ErrClaimLost, nil, idempotency.ErrClaimLost})
	e.isConfirmed(k1, true)
	e.isConfirmed(k2, false)
	e.isConfirmed(k3, true)
	e.isConfirmed(k4, false)
	e.tryClaim(k4, idempotency.InProgress) // the forged confirm did not touch the real claim
	wantErrs(t, "ReleaseBatch", e.settleBatch(false, c1, forged, c4, c2),
		[]error{idempotency.ErrClaimLost, idempotency.ErrClaimLost, nil, idempotency.ErrClaimLost})
	e.tryClaim(k1, idempotency.AlreadyConfirmed)
	c2b := e.tryClaim(k2, idempotency.Claimed)
	e.tryClaim(k4, idempotency.Claimed)
	// The holder from before the release lost the key to its successor.
	wantErrs(t, "ConfirmBatch with a superseded claim", e.settleBatch(true, c2, c2b),
		[]error{idempotency.ErrClaimLost, nil})
	e.isConfirmed(k2, true)

	// A lapsed claim is lost too.
	x, unit := s.expiryEnv(t, 1, 100)
	l1, l2 := x.key("lapsed"), x.key("live")
	lc := x.tryClaim(l1, idempotency.Claimed)
	x.wait(unit + unit/4)
	lv := x.tryClaim(l2, idempotency.Claimed)
	wantErrs(t, "ConfirmBatch with a lapsed claim", x.settleBatch(true, lc, lv),
		[]error{idempotency.ErrClaimLost, nil})
	x.isConfirmed(l1, false)
	x.isConfirmed(l2, true)
}

// testBatchEmpty: empty batches (nil or empty slices) succeed and change
// nothing.
func (s *suite) testBatchEmpty(t *testing.T) {
	e := s.newEnv(t, longTTL, longRetention)
	b := e.batch()
	expectErr(t, "TryClaimBatch(nil)", b.TryClaimBatch(e.ctx, nil, nil), nil)
	expectErr(t, "TryClaimBatch(empty)", b.TryClaimBatch(e.ctx, []idempotency.Key{}, []idempotency.ClaimResult{}), nil)
	expectErr(t, "ConfirmBatch(nil)", b.ConfirmBatch(e.ctx, nil, nil), nil)
	expectErr(t, "ConfirmBatch(empty)", b.ConfirmBatch(e.ctx, []idempotency.Claim{}, []error{}), nil)
	expectErr(t, "ReleaseBatch(nil)", b.ReleaseBatch(e.ctx, nil, nil), nil)
	expectErr(t, "ReleaseBatch(empty)", b.ReleaseBatch(e.ctx, []idempotency.Claim{}, []error{}), nil)
	e.tryClaim(e.key("m1"), idempotency.Claimed)
}

// testBatchLengths: result slices whose length differs from the batch's
// fail the call as a whole and change nothing.
func (s *suite) testBatchLengths(t *testing.T) {
	e := s.newEnv(t, longTTL, longRetention)
	b := e.batch()
	k1, k2 := e.key("m1"), e.key("m2")
	held := e.key("held")
	c := e.tryClaim(held, idempotency.Claimed)
	keys := []idempotency.Key{k1, k2}
	if err := b.TryClaimBatch(e.ctx, keys, make([]idempotency.ClaimResult, 1)); err == nil {
		t.Fatal("TryClaimBatch with 1 result for 2 keys: nil error")
	}
	if err := b.TryClaimBatch(e.ctx, keys[:1], make([]idempotency.ClaimResult, 2)); err == nil {
		t.Fatal("TryClaimBatch with 2 results for 1 key: nil error")
	}
	if err := b.TryClaimBatch(e.ctx, keys, nil); err == nil {
		t.Fatal("TryClaimBatch with no results for 2 keys: nil error")
	}
	claims := []idempotency.Claim{c, c}
	for _, op := range []struct {
		name string
		f    func(context.Context, []idempotency.Claim, []error) error
	}{{"ConfirmBatch", b.ConfirmBatch}, {"ReleaseBatch", b.ReleaseBatch}} {
		if err := op.f(e.ctx, claims[:1], nil); err == nil {
			t.Fatalf("%s with no error slot for 1 claim: nil error", op.name)
		}
		if err := op.f(e.ctx, claims[:1], make([]error, 2)); err == nil {
			t.Fatalf("%s with 2 error slots for 1 claim: nil error", op.name)
		}
		if err := op.f(e.ctx, claims, make([]error, 1)); err == nil {
			t.Fatalf("%s with 1 error slot for 2 claims: nil error", op.name)
		}
	}
	// Nothing changed: the keys are free, the claim is still held.
	e.isConfirmed(held, false)
	e.tryClaim(held, idempotency.InProgress)
	e.tryClaim(k1, idempotency.Claimed)
	e.tryClaim(k2, idempotency.Claimed)
	expectErr(t, "Confirm", e.s.Confirm(e.ctx, c), nil)
}

// testBatchTakeOver: TryClaimBatch takes over expired claims like
// TryClaim does, with new tokens; the lapsed holders' ConfirmBatch and
// ReleaseBatch get ErrClaimLost and leave the new claims intact.
func (s *suite) testBatchTakeOver(t *testing.T) {
	e, unit := s.expiryEnv(t, 1, 100)
	a, b := e.key("a"), e.key("b")
	start := time.Now()
	old := e.tryClaimBatch(a, b)
	e.wantResult(0, old[0], a, idempotency.Claimed, nil, start)
	e.wantResult(1, old[1], b, idempotency.Claimed, nil, start)
	e.wait(unit + unit/4)
	start = time.Now()
	cur := e.tryClaimBatch(a, b, a)
	e.wantResult(0, cur[0], a, idempotency.Claimed, nil, start)
	e.wantResult(1, cur[1], b, idempotency.Claimed, nil, start)
	e.wantResult(2, cur[2], a, idempotency.InProgress, nil, start)
	for i := range 2 {
		if cur[i].Claim.Token == old[i].Claim.Token {
			t.Fatalf("take-over of key %d reused token %q", i, old[i].Claim.Token)
		}
	}
	wantErrs(t, "lapsed ConfirmBatch", e.settleBatch(true, old[0].Claim), []error{idempotency.ErrClaimLost})
	wantErrs(t, "lapsed ReleaseBatch", e.settleBatch(false, old[1].Claim), []error{idempotency.ErrClaimLost})
	e.isConfirmed(a, false)
	e.tryClaim(a, idempotency.InProgress)
	e.tryClaim(b, idempotency.InProgress)
	wantErrs(t, "new holders' ConfirmBatch", e.settleBatch(true, cur[0].Claim, cur[1].Claim), []error{nil, nil})
	e.isConfirmed(a, true)
	e.isConfirmed(b, true)
}

// testBatchRetention: a confirmation made by ConfirmBatch outlives the
// claim TTL (a redelivery then is a duplicate, whether it is asked alone or
// in a batch) and is forgotten after the retention period, exactly like
// one made by Confirm.
func (s *suite) testBatchRetention(t *testing.T) {
	e, unit := s.expiryEnv(t, 1, 2)
	a, b := e.key("a"), e.key("b")
	start := time.Now()
	res := e.tryClaimBatch(a, b)
	e.wantResult(0, res[0], a, idempotency.Claimed, nil, start)
	e.wantResult(1, res[1], b, idempotency.Claimed, nil, start)
	wantErrs(t, "ConfirmBatch", e.settleBatch(true, res[0].Claim, res[1].Claim), []error{nil, nil})
	e.wait(unit + unit/4) // past the claim TTL, within retention
	e.isConfirmed(a, true)
	e.tryClaim(a, idempotency.AlreadyConfirmed)
	res = e.tryClaimBatch(b, a)
	e.wantResult(0, res[0], b, idempotency.AlreadyConfirmed, nil, start)
	e.wantResult(1, res[1], a, idempotency.AlreadyConfirmed, nil, start)
	e.wait(unit) // past retention
	e.isConfirmed(a, false)
	e.isConfirmed(b, false)
	start = time.Now()
	res = e.tryClaimBatch(a, b)
	e.wantResult(0, res[0], a, idempotency.Claimed, nil, start)
	e.wantResult(1, res[1], b, idempotency.Claimed, nil, start)
}

// batchLarge is the size of the large batch: more than any default group
// size, so a backend that splits or bounds statements is exercised.
const batchLarge = 1000

// testBatchLarge: one batch of batchLarge keys is claimed, confirmed and
// then seen as confirmed, every entry answered.
func (s *suite) testBatchLarge(t *testing.T) {
	e := s.newEnv(t, longTTL, longRetention)
	keys := make([]idempotency.Key, batchLarge)
	for i := range keys {
		keys[i] = e.key("large-" + itoa(i))
	}
	start := time.Now()
	res := e.tryClaimBatch(keys...)
	claims := make([]idempotency.Claim, len(keys))
	for i, r := range res {
		e.wantResult(i, r, keys[i], idempotency.Claimed, nil, start)
		claims[i] = r.Claim
	}
	half := len(claims) / 2
	errs := e.settleBatch(true, claims[:half]...)
	wantErrs(t, "ConfirmBatch", errs, make([]error, half))
	errs = e.settleBatch(false, claims[half:]...)
	wantErrs(t, "ReleaseBatch", errs, make([]error, len(claims)-half))
	res = e.tryClaimBatch(keys...)
	for i, r := range res {
		want := idempotency.AlreadyConfirmed
		if i >= half {
			want = idempotency.Claimed
		}
		e.wantResult(i, r, keys[i], want, nil, start)
	}
}

// testBatchRace: goroutines try-claim the same keys in batches, each in
// its own order; every key has exactly one winner.
func (s *suite) testBatchRace(t *testing.T) {
	const (
		keys       = 200
		goroutines = 8
		size       = 25
	)
	e := s.newEnv(t, longTTL, longRetention)
	b := e.batch()
	var mu sync.Mutex
	winners := make([]int, keys)
	var start, done sync.WaitGroup
	start.Add(1)
	for g := range goroutines {
		done.Add(1)
		go func() {
			defer done.Done()
			start.Wait()
			order := make([]int, keys)
			for i := range order {
				order[i] = (i*7 + g*53) % keys
			}
			for lo := 0; lo < keys; lo += size {
				batch := make([]idempotency.Key, size)
				for j := range batch {
					batch[j] = e.key("race-" + itoa(order[lo+j]))
				}
				res := make([]idempotency.ClaimResult, size)
				if err := b.TryClaimBatch(e.ctx, batch, res); err != nil {
					t.Errorf("TryClaimBatch: %v", err)
					return
				}
				for j, r := range res {
					switch {
					case r.Err != nil:
						t.Errorf("TryClaimBatch entry %d: %v", j, r.Err)
					case r.Outcome == idempotency.Claimed:
						mu.Lock()
						winners[order[lo+j]]++
						mu.Unlock()
					case r.Outcome != idempotency.InProgress:
						t.Errorf("TryClaimBatch entry %d = %v, want claimed or in-progress", j, r.Outcome)
					}
				}
			}
		}()
	}
	start.Done()
	testwait.Group(t, &done, waitDeadline, "the end of the goroutines racing with batches")
	for i, n := range winners {
		if n != 1 {
			t.Fatalf("key %d: %d winners, want exactly 1", i, n)
		}
	}
}

// testBatchConcurrent: goroutines try-claim overlapping batches of keys in
// different orders (so a backend's row locks could cross), confirm or
// release what they claimed and retry what was in progress, until every
// key is confirmed. Each key is confirmed by exactly one holder, no two
// claims of a key are ever held at once, and no batch fails (a deadlock
// would).
func (s *suite) testBatchConcurrent(t *testing.T) {
	const (
		nkeys   = 300
		size    = 48
		workers = 8
	)
	e := s.newEnv(t, longTTL, longRetention)
	b := e.batch()
	index := make(map[string]int, nkeys) // key id → its index; read only
	for i := range nkeys {
		index["conc-"+itoa(i)] = i
	}
	var (
		holders   [nkeys]atomic.Int32
		confirmed [nkeys]atomic.Int32
		wg        sync.WaitGroup
	)
	deadline := time.Now().Add(waitDeadline)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), 7))
			for {
				var todo []int
				for i := range nkeys {
					if confirmed[i].Load() == 0 {
						todo = append(todo, i)
					}
				}
				if len(todo) == 0 {
					return
				}
				if time.Now().After(deadline) {
					t.Errorf("worker %d: %d keys not confirmed within %v", w, len(todo), waitDeadline)
					return
				}
				rng.Shuffle(len(todo), func(a, b int) { todo[a], todo[b] = todo[b], todo[a] })
				todo = todo[:min(size, len(todo))]
				keys := make([]idempotency.Key, len(todo))
				for j, i := range todo {
					keys[j] = e.key("conc-" + itoa(i))
				}
				res := make([]idempotency.ClaimResult, len(keys))
				if err := b.TryClaimBatch(e.ctx, keys, res); err != nil {
					t.Errorf("worker %d: TryClaimBatch: %v", w, err)
					return
				}
				var conf, rel []idempotency.Claim
				for j, r := range res {
					if r.Err != nil {
						t.Errorf("worker %d: key %d: %v", w, todo[j], r.Err)
						return
					}
					if r.Outcome != idempotency.Claimed {
						continue
					}
					if n := holders[todo[j]].Add(1); n != 1 {
						t.Errorf("key %d held by %d claims at once", todo[j], n)
					}
					if rng.IntN(4) == 0 {
						rel = append(rel, r.Claim)
					} else {
						conf = append(conf, r.Claim)
					}
				}
				// Holders are counted down before the store hears of it,
				// so a count above one is a real overlap.
				for _, c := range rel {
					holders[index[c.Key.ID]].Add(-1)
				}
				for _, c := range conf {
					holders[index[c.Key.ID]].Add(-1)
				}
				for _, op := range []struct {
					name   string
					claims []idempotency.Claim
					f      func(context.Context, []idempotency.Claim, []error) error
				}{{"ReleaseBatch", rel, b.ReleaseBatch}, {"ConfirmBatch", conf, b.ConfirmBatch}} {
					errs := make([]error, len(op.claims))
					if err := op.f(e.ctx, op.claims, errs); err != nil {
						t.Errorf("worker %d: %s: %v", w, op.name, err)
						return
					}
					for j, err := range errs {
						if err != nil {
							t.Errorf("worker %d: %s entry %d (%s): %v", w, op.name, j, op.claims[j].Key.ID, err)
						} else if op.name == "ConfirmBatch" {
							confirmed[index[op.claims[j].Key.ID]].Add(1)
						}
					}
				}
			}
		}()
	}
	testwait.Group(t, &wg, waitDeadline+testwait.Long, "the end of the "+itoa(workers)+" batch workers")
	for i := range nkeys {
		if n := confirmed[i].Load(); n != 1 {
			t.Fatalf("key %d confirmed %d times, want 1", i, n)
		}
		e.isConfirmed(e.key("conc-"+itoa(i)), true)
	}
}

// testBatchCancelled: a cancelled or expired context fails the whole batch
// with its error and changes nothing.
func (s *suite) testBatchCancelled(t *testing.T) {
	e := s.newEnv(t, longTTL, longRetention)
	b := e.batch()
	held, free := e.key("held"), e.key("free")
	c := e.tryClaim(held, idempotency.Claimed)
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	expired, cancel2 := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
	defer cancel2()
	for _, ctx := range []context.Context{cancelled, expired} {
		want := ctx.Err()
		res := make([]idempotency.ClaimResult, 2)
		expectErr(t, "TryClaimBatch", b.TryClaimBatch(ctx, []idempotency.Key{free, held}, res), want)
		errs := make([]error, 1)
		expectErr(t, "ConfirmBatch", b.ConfirmBatch(ctx, []idempotency.Claim{c}, errs), want)
		expectErr(t, "ReleaseBatch", b.ReleaseBatch(ctx, []idempotency.Claim{c}, errs), want)
	}
	e.isConfirmed(held, false)
	e.tryClaim(held, idempotency.InProgress)
	e.tryClaim(free, idempotency.Claimed)
	expectErr(t, "Confirm", e.s.Confirm(e.ctx, c), nil)
}

// testBatchClosed: a closed store fails every batch with ErrClosed.
func (s *suite) testBatchClosed(t *testing.T) {
	e := s.newEnv(t, longTTL, longRetention)
	b := e.batch()
	c := e.tryClaim(e.key("m1"), idempotency.Claimed)
	expectErr(t, "Close", e.s.Close(), nil)
	res := make([]idempotency.ClaimResult, 1)
	expectErr(t, "TryClaimBatch after Close", b.TryClaimBatch(e.ctx, []idempotency.Key{e.key("m2")}, res), idempotency.ErrClosed)
	errs := make([]error, 1)
	expectErr(t, "ConfirmBatch after Close", b.ConfirmBatch(e.ctx, []idempotency.Claim{c}, errs), idempotency.ErrClosed)
	expectErr(t, "ReleaseBatch after Close", b.ReleaseBatch(e.ctx, []idempotency.Claim{c}, errs), idempotency.ErrClosed)
}

// testBatchUnreachable: with the server gone every batch fails as a whole,
// with a backend error — never per-entry verdicts.
func (s *suite) testBatchUnreachable(t *testing.T) {
	o := idempotency.Options{ClaimTTL: longTTL, Retention: longRetention}
	st := s.caps.Unreachable(t, o)
	t.Cleanup(func() { _ = st.Close() })
	b, ok := st.(idempotency.BatchStore)
	if !ok {
		t.Fatalf("the unreachable store %T does not implement idempotency.BatchStore", st)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ns := "storetest-" + randHex(6)
	k1, k2 := idempotency.Key{Namespace: ns, ID: "m1"}, idempotency.Key{Namespace: ns, ID: "m2"}
	c := idempotency.Claim{Key: k1, Token: claimkit.NewToken(), Expires: time.Now().Add(time.Minute)}
	notVerdict := func(op string, err error) {
		t.Helper()
		if err == nil {
			t.Fatalf("%s on an unreachable server: nil error", op)
		}
		if errors.Is(err, idempotency.ErrClaimLost) || errors.Is(err, idempotency.ErrInvalidKey) {
			t.Fatalf("%s on an unreachable server: %v, a verdict instead of a backend error", op, err)
		}
	}
	res := make([]idempotency.ClaimResult, 2)
	notVerdict("TryClaimBatch", b.TryClaimBatch(ctx, []idempotency.Key{k1, k2}, res))
	errs := make([]error, 2)
	notVerdict("ConfirmBatch", b.ConfirmBatch(ctx, []idempotency.Claim{c, c}, errs))
	notVerdict("ReleaseBatch", b.ReleaseBatch(ctx, []idempotency.Claim{c, c}, errs))
}

// testBatchModel drives the store with random sequences of batch and
// single-key operations on a few keys (an invalid one among them, keys
// repeated within a batch, stale and forged claims) and checks every
// answer against a reference model: a batch must answer exactly as the
// single-key calls would have, one after the other. On a store that reads
// the clock the fake clock moves in steps that land before, on and after
// expiry boundaries; on a ServerTime store nothing expires during the case
// (the TTL is long) and the claims' expiry times are only checked to lie
// in the future.
func (s *suite) testBatchModel(t *testing.T) {
	ttl, ret := 10*time.Second, 60*time.Second
	if s.caps.ServerTime {
		ttl, ret = longTTL, longRetention
	}
	e := s.newEnv(t, ttl, ret)
	b := e.batch()
	type entry struct {
		confirmed bool
		owner     string
		expires   time.Time
	}
	steps := []time.Duration{time.Nanosecond, time.Second, ttl - time.Nanosecond, ttl, ret / 2, ret}
	ops := []string{"tryBatch", "confirmBatch", "releaseBatch", "try", "confirm", "release", "renew", "is"}
	if e.clock != nil {
		ops = append(ops, "wait")
	}
	rapid.Check(t, func(rt *rapid.T) {
		ns := "model-" + randHex(6)
		// The last two: an invalid key, and one longer than any index
		// (stored hashed).
		keys := []idempotency.Key{{Namespace: ns, ID: "a"}, {Namespace: ns, ID: "b"}, {Namespace: ns, ID: "c"}, {Namespace: ns},
			{Namespace: ns, ID: strings.Repeat("long", claimkit.DefaultMaxKeyLength/4+1)}}
		model := map[idempotency.Key]entry{}
		// Every claim handed out, stale ones too, and forged ones: a token
		// never issued, one on the invalid key, and none at all.
		var claims []idempotency.Claim
		claims = append(claims, idempotency.Claim{Key: keys[0], Token: claimkit.NewToken()},
			idempotency.Claim{Key: keys[3], Token: claimkit.NewToken()},
			idempotency.Claim{Key: keys[1]})
		ctx := e.ctx
		now := func() time.Time {
			if e.clock != nil {
				return e.clock.Now()
			}
			return time.Time{} // a ServerTime store: nothing expires
		}
		live := func(k idempotency.Key) (entry, bool) {
			en, ok := model[k]
			return en, ok && (e.clock == nil || en.expires.After(now()))
		}
		held := func(c idempotency.Claim) bool {
			en, ok := live(c.Key)
			return ok && !en.confirmed && en.owner == c.Token
		}
		// claimOutcome applies a TryClaim of k to the model and returns
		// the expected answer.
		expectClaim := func(k idempotency.Key) (idempotency.Outcome, error) {
			if k.Validate() != nil {
				return 0, idempotency.ErrInvalidKey
			}
			if en, ok := live(k); ok {
				if en.confirmed {
					return idempotency.AlreadyConfirmed, nil
				}
				return idempotency.InProgress, nil
			}
			return idempotency.Claimed, nil
		}
		// checkClaimed checks a fresh claim of k and records it.
		checkClaimed := func(what string, k idempotency.Key, c idempotency.Claim, start time.Time) {
			if c.Key != k || c.Token == "" {
				rt.Fatalf("%s(%s) claim %+v, want key and token", what, k.ID, c)
			}
			if e.clock != nil && !c.Expires.Equal(now().Add(ttl)) || e.clock == nil && !c.Expires.After(start) {
				rt.Fatalf("%s(%s) claim expires %v, want now+TTL", what, k.ID, c.Expires)
			}
			for _, old := range claims {
				if old.Token == c.Token {
					rt.Fatalf("%s(%s) reused token %q", what, k.ID, c.Token)
				}
			}
			model[k] = entry{owner: c.Token, expires: now().Add(ttl)}
			claims = append(claims, c)
		}
		// expectSettle applies a Confirm (confirm) or Release of c to the
		// model and returns the expected error.
		expectSettle := func(c idempotency.Claim, confirm bool) error {
			if c.Key.Validate() != nil {
				return idempotency.ErrInvalidKey
			}
			if !held(c) {
				return idempotency.ErrClaimLost
			}
			if confirm {
				model[c.Key] = entry{confirmed: true, expires: now().Add(ret)}
			} else {
				delete(model, c.Key)
			}
			return nil
		}
		matches := func(err, want error) bool {
			return want == nil && err == nil || want != nil && errors.Is(err, want)
		}
		pickClaims := func(label string) []idempotency.Claim {
			n := rapid.IntRange(0, 8).Draw(rt, label+"-size")
			cs := make([]idempotency.Claim, n)
			for i := range cs {
				cs[i] = claims[rapid.IntRange(0, len(claims)-1).Draw(rt, label)]
			}
			return cs
		}
		n := rapid.IntRange(1, 30).Draw(rt, "steps")
		for range n {
			switch op := rapid.SampledFrom(ops).Draw(rt, "op"); op {
			case "tryBatch":
				ks := rapid.SliceOfN(rapid.SampledFrom(keys), 0, 10).Draw(rt, "keys")
				res := make([]idempotency.ClaimResult, len(ks))
				start := time.Now()
				if err := b.TryClaimBatch(ctx, ks, res); err != nil {
					rt.Fatalf("TryClaimBatch(%d keys): %v", len(ks), err)
				}
				for i, k := range ks {
					want, wantErr := expectClaim(k)
					r := res[i]
					if !matches(r.Err, wantErr) || r.Outcome != want {
						rt.Fatalf("TryClaimBatch entry %d (%q) = %v, %v; model says %v, %v", i, k.ID, r.Outcome, r.Err, want, wantErr)
					}
					if want == idempotency.Claimed {
						checkClaimed("TryClaimBatch", k, r.Claim, start)
					} else if r.Claim != (idempotency.Claim{}) {
						rt.Fatalf("TryClaimBatch entry %d (%q) = %v with a claim", i, k.ID, r.Outcome)
					}
				}
			case "confirmBatch", "releaseBatch":
				confirm := op == "confirmBatch"
				cs := pickClaims("claim")
				errs := make([]error, len(cs))
				f := b.ReleaseBatch
				if confirm {
					f = b.ConfirmBatch
				}
				if err := f(ctx, cs, errs); err != nil {
					rt.Fatalf("%s(%d claims): %v", op, len(cs), err)
				}
				for i, c := range cs {
					if want := expectSettle(c, confirm); !matches(errs[i], want) {
						rt.Fatalf("%s entry %d (%q, %.8s) = %v; model says %v", op, i, c.Key.ID, c.Token, errs[i], want)
					}
				}
			case "try":
				k := rapid.SampledFrom(keys).Draw(rt, "key")
				want, wantErr := expectClaim(k)
				start := time.Now()
				got, c, err := e.s.TryClaim(ctx, k)
				if !matches(err, wantErr) || got != want {
					rt.Fatalf("TryClaim(%q) = %v, %v; model says %v, %v", k.ID, got, err, want, wantErr)
				}
				if got == idempotency.Claimed {
					checkClaimed("TryClaim", k, c, start)
				}
			case "confirm", "release":
				c := claims[rapid.IntRange(0, len(claims)-1).Draw(rt, "claim")]
				var err error
				if op == "confirm" {
					err = e.s.Confirm(ctx, c)
				} else {
					err = e.s.Release(ctx, c)
				}
				if want := expectSettle(c, op == "confirm"); !matches(err, want) {
					rt.Fatalf("%s(%q, %.8s) = %v; model says %v", op, c.Key.ID, c.Token, err, want)
				}
			case "renew":
				c := claims[rapid.IntRange(0, len(claims)-1).Draw(rt, "claim")]
				var want error
				switch {
				case c.Key.Validate() != nil:
					want = idempotency.ErrInvalidKey
				case !held(c):
					want = idempotency.ErrClaimLost
				}
				start := time.Now()
				r, err := e.s.Renew(ctx, c)
				if !matches(err, want) {
					rt.Fatalf("Renew(%q, %.8s) = %v; model says %v", c.Key.ID, c.Token, err, want)
				}
				if want == nil {
					if r.Token != c.Token || e.clock != nil && !r.Expires.Equal(now().Add(ttl)) || e.clock == nil && !r.Expires.After(start) {
						rt.Fatalf("Renew = %+v, want token %s expiring now+TTL", r, c.Token)
					}
					model[c.Key] = entry{owner: c.Token, expires: now().Add(ttl)}
				}
			case "is":
				k := rapid.SampledFrom(keys).Draw(rt, "key")
				en, ok := live(k)
				want := ok && en.confirmed
				got, err := e.s.IsConfirmed(ctx, k)
				var wantErr error
				if k.Validate() != nil {
					wantErr = idempotency.ErrInvalidKey
				}
				if !matches(err, wantErr) || got != want {
					rt.Fatalf("IsConfirmed(%q) = %v, %v; model says %v, %v", k.ID, got, err, want, wantErr)
				}
			case "wait":
				e.clock.Advance(rapid.SampledFrom(steps).Draw(rt, "wait"))
			}
		}
	})
}
