package sqlitestore_test

import (
	"context"
	"errors"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/acemq/msgaudit/idempotency"
	"github.com/acemq/msgaudit/idempotency/storetest"
)

// sameVerdict reports whether two per-key errors are the same answer: both
// nil, or both the same sentinel.
func sameVerdict(a, b error) bool {
	switch {
	case a == nil || b == nil:
		return a == nil && b == nil
	case errors.Is(a, idempotency.ErrClaimLost):
		return errors.Is(b, idempotency.ErrClaimLost)
	case errors.Is(a, idempotency.ErrInvalidKey):
		return errors.Is(b, idempotency.ErrInvalidKey)
	}
	return false
}

// TestSQLiteBatchMatchesSingleCalls drives the SQLite store with random
// TryClaimBatch, ConfirmBatch and ReleaseBatch calls (duplicate keys,
// stale and repeated claims, invalid keys, the clock moving across expiry)
// and the memory store with the same keys one single-key call at a time in
// slice order: every per-key answer must be the same.
func TestSQLiteBatchMatchesSingleCalls(t *testing.T) {
	t.Parallel()
	const (
		ttl = 10 * time.Second
		ret = 60 * time.Second
	)
	ctx := context.Background()
	clock := storetest.NewFakeClock(time.Unix(1e9, 0))
	o := idempotency.Options{ClaimTTL: ttl, Retention: ret, Clock: clock}
	s := openSQLiteTest(t, filepath.Join(t.TempDir(), "batch.db"), o)
	ref, err := idempotency.NewMemory(o)
	if err != nil {
		t.Fatal(err)
	}
	defer ref.Close()
	steps := []time.Duration{time.Nanosecond, time.Second, ttl - time.Nanosecond, ttl, ret}
	run := 0
	rapid.Check(t, func(rt *rapid.T) {
		run++
		ns := "run" + strconv.Itoa(run)
		keys := []idempotency.Key{{Namespace: ns, ID: "a"}, {Namespace: ns, ID: "b"}, {Namespace: ns, ID: "c"}, {Namespace: ns}}
		// pairs[i] is one claim as each store handed it out.
		type pair struct{ got, want idempotency.Claim }
		var pairs []pair
		for range rapid.IntRange(1, 25).Draw(rt, "steps") {
			switch op := rapid.SampledFrom([]string{"claim", "confirm", "release", "wait"}).Draw(rt, "op"); op {
			case "claim":
				batch := rapid.SliceOfN(rapid.SampledFrom(keys), 1, 8).Draw(rt, "keys")
				res := make([]idempotency.ClaimResult, len(batch))
				if err := s.TryClaimBatch(ctx, batch, res); err != nil {
					rt.Fatalf("TryClaimBatch: %v", err)
				}
				for i, k := range batch {
					out, c, err := ref.TryClaim(ctx, k)
					if res[i].Outcome != out || !sameVerdict(res[i].Err, err) {
						rt.Fatalf("TryClaimBatch[%d] (%q) = %v, %v; single calls say %v, %v", i, k.ID, res[i].Outcome, res[i].Err, out, err)
					}
					if out == idempotency.Claimed {
						g := res[i].Claim
						if g.Key != k || g.Token == "" || !g.Expires.Equal(c.Expires) {
							rt.Fatalf("TryClaimBatch[%d] claim %+v, want key %v expiring %v", i, g, k, c.Expires)
						}
						pairs = append(pairs, pair{g, c})
					}
				}
			case "confirm", "release":
				if len(pairs) == 0 {
					continue
				}
				idx := rapid.SliceOfN(rapid.IntRange(0, len(pairs)-1), 1, 8).Draw(rt, "claims")
				got := make([]idempotency.Claim, len(idx))
				for i, j := range idx {
					got[i] = pairs[j].got
				}
				if rapid.Bool().Draw(rt, "tokenless") {
					got = append(got, idempotency.Claim{Key: keys[0]})
					idx = append(idx, -1)
				}
				errs := make([]error, len(got))
				batch, single := s.ConfirmBatch, ref.Confirm
				if op == "release" {
					batch, single = s.ReleaseBatch, ref.Release
				}
				if err := batch(ctx, got, errs); err != nil {
					rt.Fatalf("%s batch: %v", op, err)
				}
				for i, j := range idx {
					want := idempotency.Claim{Key: keys[0]}
					if j >= 0 {
						want = pairs[j].want
					}
					if err := single(ctx, want); !sameVerdict(errs[i], err) {
						rt.Fatalf("%s batch[%d] = %v; single calls say %v", op, i, errs[i], err)
					}
				}
			case "wait":
				clock.Advance(rapid.SampledFrom(steps).Draw(rt, "wait"))
			}
		}
		for _, k := range keys[:3] {
			got, err1 := s.IsConfirmed(ctx, k)
			want, err2 := ref.IsConfirmed(ctx, k)
			if err1 != nil || err2 != nil || got != want {
				rt.Fatalf("IsConfirmed(%q) = %v, %v; single calls say %v, %v", k.ID, got, err1, want, err2)
			}
		}
	})
}

// TestSQLiteBatchLengths: result slices of the wrong length fail the call
// before it touches the file; empty batches succeed.
func TestSQLiteBatchLengths(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := openSQLiteTest(t, filepath.Join(t.TempDir(), "len.db"), idempotency.Options{})
	k := idempotency.Key{Namespace: "q", ID: "m"}
	if err := s.TryClaimBatch(ctx, []idempotency.Key{k}, nil); err == nil {
		t.Fatal("TryClaimBatch with no result slot: nil error")
	}
	if err := s.ConfirmBatch(ctx, []idempotency.Claim{{Key: k, Token: "t"}}, nil); err == nil {
		t.Fatal("ConfirmBatch with no result slot: nil error")
	}
	if err := s.ReleaseBatch(ctx, nil, make([]error, 1)); err == nil {
		t.Fatal("ReleaseBatch with an extra result slot: nil error")
	}
	if ok, err := s.IsConfirmed(ctx, k); err != nil || ok {
		t.Fatalf("IsConfirmed after failed batches = %v, %v", ok, err)
	}
	if o, _, err := s.TryClaim(ctx, k); err != nil || o != idempotency.Claimed {
		t.Fatalf("TryClaim after failed batches = %v, %v; want claimed", o, err)
	}
	for _, err := range []error{s.TryClaimBatch(ctx, nil, nil), s.ConfirmBatch(ctx, nil, nil), s.ReleaseBatch(ctx, nil, nil)} {
		if err != nil {
			t.Fatalf("empty batch: %v", err)
		}
	}
}
