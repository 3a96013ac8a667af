package pgstore_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/acemq/msgaudit/idempotency"
	"github.com/acemq/msgaudit/internal/testkit/storetestkit"
	"github.com/acemq/msgaudit/internal/testkit/testwait"
)

// TestPostgresBatchMatchesSingle drives two stores on two tables with the
// same random operations: one store gets each batch as one TryClaimBatch,
// ConfirmBatch or ReleaseBatch call, the other gets the same keys and
// claims one single-key call at a time in slice order. Every answer must be
// the same: outcomes, per-key errors, which claims are held. Batches repeat
// keys and claims, mix in invalid keys, tokens that were never issued and
// claims already settled.
func TestPostgresBatchMatchesSingle(t *testing.T) {
	t.Parallel()
	ctx := testwait.Context(t, 5*time.Minute)
	o := idempotency.Options{ClaimTTL: time.Hour, Retention: time.Hour}
	batch, _, _ := newPostgresTestStore(t, o, nil, 2)
	single, _, _ := newPostgresTestStore(t, o, nil, 2)
	rapid.Check(t, func(rt *rapid.T) {
		ns := "eq-" + storetestkit.Hex(6)
		pool := []idempotency.Key{
			{Namespace: ns, ID: "a"}, {Namespace: ns, ID: "b"}, {Namespace: ns, ID: "c"},
			{Namespace: ns, ID: "d"}, {Namespace: ns, ID: strings.Repeat("long", 200)},
			{Namespace: ns}, // invalid: empty ID
		}
		// claims[j] is the j-th claim each store handed out: the same
		// key, each store's own token.
		var bClaims, sClaims []idempotency.Claim
		steps := rapid.IntRange(1, 12).Draw(rt, "steps")
		for range steps {
			switch op := rapid.SampledFrom([]string{"try", "confirm", "release"}).Draw(rt, "op"); op {
			case "try":
				keys := rapid.SliceOfN(rapid.SampledFrom(pool), 0, 8).Draw(rt, "keys")
				res := make([]idempotency.ClaimResult, len(keys))
				if err := batch.TryClaimBatch(ctx, keys, res); err != nil {
					rt.Fatalf("TryClaimBatch: %v", err)
				}
				for i, k := range keys {
					out, c, err := single.TryClaim(ctx, k)
					if out != res[i].Outcome || !errors.Is(res[i].Err, err) || (err == nil) != (res[i].Err == nil) {
						rt.Fatalf("key %d (%.8s): batch %v, %v; single %v, %v", i, k.ID, res[i].Outcome, res[i].Err, out, err)
					}
					if out == idempotency.Claimed {
						bc := res[i].Claim
						if bc.Key != k || bc.Token == "" || bc.Expires.Before(time.Now().Add(50*time.Minute)) {
							rt.Fatalf("key %d: batch claim %+v, want the key, a token and an expiry an hour away", i, bc)
						}
						bClaims = append(bClaims, bc)
						sClaims = append(sClaims, c)
					}
				}
			case "confirm", "release":
				// Indexes of claims handed out, or -1: a forged token.
				idx := rapid.SliceOfN(rapid.IntRange(-1, len(bClaims)-1), 0, 8).Draw(rt, "claims")
				bc := make([]idempotency.Claim, len(idx))
				sc := make([]idempotency.Claim, len(idx))
				for i, j := range idx {
					if j < 0 {
						k := rapid.SampledFrom(pool).Draw(rt, "forged")
						tok := rapid.SampledFrom([]string{"", "forged"}).Draw(rt, "token")
						bc[i] = idempotency.Claim{Key: k, Token: tok}
						sc[i] = bc[i]
						continue
					}
					bc[i], sc[i] = bClaims[j], sClaims[j]
				}
				errs := make([]error, len(bc))
				var err error
				if op == "confirm" {
					err = batch.ConfirmBatch(ctx, bc, errs)
				} else {
					err = batch.ReleaseBatch(ctx, bc, errs)
				}
				if err != nil {
					rt.Fatalf("%sBatch: %v", op, err)
				}
				for i, c := range sc {
					var err error
					if op == "confirm" {
						err = single.Confirm(ctx, c)
					} else {
						err = single.Release(ctx, c)
					}
					if !errors.Is(errs[i], err) || (err == nil) != (errs[i] == nil) {
						rt.Fatalf("%s claim %d (index %d, key %.8s): batch %v, single %v", op, i, idx[i], c.Key.ID, errs[i], err)
					}
				}
			}
		}
		// Both stores end in the same state.
		for _, k := range pool[:len(pool)-1] {
			b, err1 := batch.IsConfirmed(ctx, k)
			s, err2 := single.IsConfirmed(ctx, k)
			if err1 != nil || err2 != nil || b != s {
				rt.Fatalf("IsConfirmed(%.8s): batch %v, %v; single %v, %v", k.ID, b, err1, s, err2)
			}
		}
	})
}

// TestPostgresBatchRepeats pins the answers for keys and claims that repeat
// within one batch: the first occurrence is answered as the single call
// would, later ones as a call right after it.
func TestPostgresBatchRepeats(t *testing.T) {
	t.Parallel()
	ctx := testwait.Context(t, time.Minute)
	s, _, _ := newPostgresTestStore(t, idempotency.Options{}, nil, 2)
	k := func(id string) idempotency.Key { return idempotency.Key{Namespace: "rep", ID: id} }

	// done is confirmed beforehand, held is claimed by someone else.
	_, dc, err := s.TryClaim(ctx, k("done"))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Confirm(ctx, dc); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.TryClaim(ctx, k("held")); err != nil {
		t.Fatal(err)
	}

	keys := []idempotency.Key{k("new"), k("done"), k("new"), k("held"), {}, k("done"), k("held"), k("new")}
	want := []idempotency.Outcome{idempotency.Claimed, idempotency.AlreadyConfirmed, idempotency.InProgress, idempotency.InProgress, 0, idempotency.AlreadyConfirmed, idempotency.InProgress, idempotency.InProgress}
	res := make([]idempotency.ClaimResult, len(keys))
	if err := s.TryClaimBatch(ctx, keys, res); err != nil {
		t.Fatal(err)
	}
	for i, r := range res {
		if i == 4 {
			if !errors.Is(r.Err, idempotency.ErrInvalidKey) {
				t.Errorf("key %d (empty): err %v, want ErrInvalidKey", i, r.Err)
			}
			continue
		}
		if r.Err != nil || r.Outcome != want[i] {
			t.Errorf("key %d (%s): %v, %v; want %v", i, keys[i].ID, r.Outcome, r.Err, want[i])
		}
		if (r.Outcome == idempotency.Claimed) != (r.Claim.Token != "") {
			t.Errorf("key %d: outcome %v with claim %+v", i, r.Outcome, r.Claim)
		}
	}

	c := res[0].Claim
	errs := make([]error, 4)
	if err := s.ConfirmBatch(ctx, []idempotency.Claim{c, c, {Key: k("x")}, {Key: k("new"), Token: "forged"}}, errs); err != nil {
		t.Fatal(err)
	}
	for i, want := range []error{nil, idempotency.ErrClaimLost, idempotency.ErrClaimLost, idempotency.ErrClaimLost} {
		if !errors.Is(errs[i], want) || (want == nil) != (errs[i] == nil) {
			t.Errorf("ConfirmBatch claim %d: %v, want %v", i, errs[i], want)
		}
	}
	if ok, err := s.IsConfirmed(ctx, k("new")); err != nil || !ok {
		t.Errorf("IsConfirmed after ConfirmBatch = %v, %v", ok, err)
	}
}

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
