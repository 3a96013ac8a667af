package pgstore_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/acemq/msgaudit/idempotency"
	"github.com/acemq/msgaudit/internal/testkit/testwait"
)

// TestPostgresBatchRoundTrips: each batch call is one statement (no
// prepare once warm), whatever its size; an empty or all-invalid batch
// sends nothing.
func TestPostgresBatchRoundTrips(t *testing.T) {
	t.Parallel()
	ctx := testwait.Context(t, time.Minute)
	var tr pgCounter
	s, _, _ := newPostgresTestStore(t, idempotency.Options{}, &tr, 1)
	count := func(f func() error) (int64, int64) {
		t.Helper()
		q, pr := tr.queries.Load(), tr.prepares.Load()
		if err := f(); err != nil {
			t.Fatal(err)
		}
		return tr.queries.Load() - q, tr.prepares.Load() - pr
	}
	// The first two rounds prepare the statements: the array forms and,
	// for one distinct claim, the single-key ones.
	for round, n := range []int{4, 2, 64, 10, 2} {
		keys := make([]idempotency.Key, n)
		for i := range keys {
			keys[i] = idempotency.Key{Namespace: "rtb", ID: fmt.Sprint(round, "-", i)}
		}
		res := make([]idempotency.ClaimResult, n)
		q, pr := count(func() error { return s.TryClaimBatch(ctx, keys, res) })
		claims := make([]idempotency.Claim, n)
		for i, r := range res {
			claims[i] = r.Claim
		}
		errs := make([]error, n)
		q2, pr2 := count(func() error { return s.ConfirmBatch(ctx, claims[:n/2], errs[:n/2]) })
		q3, pr3 := count(func() error { return s.ReleaseBatch(ctx, claims[n/2:], errs[n/2:]) })
		if round < 2 {
			continue
		}
		for name, c := range map[string][2]int64{"TryClaimBatch": {q, pr}, "ConfirmBatch": {q2, pr2}, "ReleaseBatch": {q3, pr3}} {
			if c != [2]int64{1, 0} {
				t.Errorf("%d keys: %s sent %d statements and %d prepares, want 1 and 0", n, name, c[0], c[1])
			}
		}
	}
	if q, _ := count(func() error { return s.TryClaimBatch(ctx, nil, nil) }); q != 0 {
		t.Errorf("empty TryClaimBatch sent %d statements", q)
	}
	res := make([]idempotency.ClaimResult, 2)
	if q, _ := count(func() error { return s.TryClaimBatch(ctx, []idempotency.Key{{}, {Namespace: "x"}}, res) }); q != 0 {
		t.Errorf("all-invalid TryClaimBatch sent %d statements", q)
	}
	errs := make([]error, 1)
	if q, _ := count(func() error { return s.ConfirmBatch(ctx, []idempotency.Claim{{Key: idempotency.Key{ID: "x"}}}, errs) }); q != 0 || !errors.Is(errs[0], idempotency.ErrClaimLost) {
		t.Errorf("ConfirmBatch of a tokenless claim sent %d statements, answered %v", q, errs[0])
	}
}
