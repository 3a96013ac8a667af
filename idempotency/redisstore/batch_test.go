package redisstore_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"pgregory.net/rapid"

	"github.com/acemq/msgaudit/idempotency"
	"github.com/acemq/msgaudit/idempotency/redisstore"
	"github.com/acemq/msgaudit/internal/claimkit"
	"github.com/acemq/msgaudit/internal/testkit/storetestkit"
	"github.com/acemq/msgaudit/internal/testkit/testwait"
)

// errClass names the part of an error a caller acts on.
func errClass(err error) string {
	switch {
	case err == nil:
		return "nil"
	case errors.Is(err, idempotency.ErrClaimLost):
		return "claim-lost"
	case errors.Is(err, idempotency.ErrInvalidKey):
		return "invalid-key"
	}
	return "error: " + err.Error()
}

// checkBatchAgainstSingles drives two stores on separate prefixes of one
// server with the same random operations: the batch store through
// TryClaimBatch, ConfirmBatch and ReleaseBatch, the other through the
// single-key calls in slice order. Every answer must be the same. Batches
// repeat keys and claims, mix in invalid keys, empty tokens, stale and
// foreign claims.
func checkBatchAgainstSingles(t *testing.T, batched, single idempotency.Store) {
	ctx := testwait.Context(t, 5*time.Minute)
	bs := batched.(idempotency.BatchStore)
	rapid.Check(t, func(rt *rapid.T) {
		ns := "batch-" + storetestkit.Hex(6)
		keys := []idempotency.Key{
			{Namespace: ns, ID: "a"}, {Namespace: ns, ID: "b"}, {Namespace: ns, ID: "c"},
			{Namespace: ns, ID: "d"}, {Namespace: ns}, // the last is invalid
		}
		// handles pairs the two stores' claims of one Claimed answer.
		type handle struct{ b, s idempotency.Claim }
		var handles []handle
		steps := rapid.IntRange(1, 25).Draw(rt, "steps")
		for range steps {
			n := rapid.IntRange(0, 20).Draw(rt, "size")
			switch op := rapid.SampledFrom([]string{"try", "confirm", "release"}).Draw(rt, "op"); op {
			case "try":
				ks := make([]idempotency.Key, n)
				for i := range ks {
					ks[i] = rapid.SampledFrom(keys).Draw(rt, "key")
				}
				res := make([]idempotency.ClaimResult, n)
				if err := bs.TryClaimBatch(ctx, ks, res); err != nil {
					rt.Fatalf("TryClaimBatch: %v", err)
				}
				for i, k := range ks {
					out, c, err := single.TryClaim(ctx, k)
					if res[i].Outcome != out || errClass(res[i].Err) != errClass(err) {
						rt.Fatalf("key %d (%q) of %d: batch %v/%v, single %v/%v", i, k.ID, n, res[i].Outcome, res[i].Err, out, err)
					}
					if out != idempotency.Claimed {
						if res[i].Claim != (idempotency.Claim{}) {
							rt.Fatalf("key %d: %v with a claim %+v", i, out, res[i].Claim)
						}
						continue
					}
					bc := res[i].Claim
					if bc.Key != k || bc.Token == "" || !bc.Expires.After(time.Now().Add(30*time.Minute)) {
						rt.Fatalf("key %d: claim %+v: want key %q, a token, an expiry a claim TTL ahead", i, bc, k.ID)
					}
					handles = append(handles, handle{bc, c})
				}
			case "confirm", "release":
				bcs := make([]idempotency.Claim, n)
				scs := make([]idempotency.Claim, n)
				for i := range bcs {
					switch kind := rapid.IntRange(0, 9).Draw(rt, "claim"); {
					case kind < 7 && len(handles) > 0:
						h := handles[rapid.IntRange(0, len(handles)-1).Draw(rt, "handle")]
						bcs[i], scs[i] = h.b, h.s
					case kind == 7:
						k := rapid.SampledFrom(keys).Draw(rt, "key")
						bcs[i] = idempotency.Claim{Key: k} // empty token
						scs[i] = bcs[i]
					default:
						k := rapid.SampledFrom(keys).Draw(rt, "key")
						tok := claimkit.NewToken() // never held
						bcs[i] = idempotency.Claim{Key: k, Token: tok}
						scs[i] = bcs[i]
					}
				}
				errs := make([]error, n)
				var err error
				if op == "confirm" {
					err = bs.ConfirmBatch(ctx, bcs, errs)
				} else {
					err = bs.ReleaseBatch(ctx, bcs, errs)
				}
				if err != nil {
					rt.Fatalf("%sBatch: %v", op, err)
				}
				for i := range scs {
					var serr error
					if op == "confirm" {
						serr = single.Confirm(ctx, scs[i])
					} else {
						serr = single.Release(ctx, scs[i])
					}
					if errClass(errs[i]) != errClass(serr) {
						rt.Fatalf("%s claim %d (%q) of %d: batch %v, single %v", op, i, scs[i].Key.ID, n, errs[i], serr)
					}
				}
			}
		}
		// The stores agree on what is confirmed, too.
		for _, k := range keys[:4] {
			a, errA := batched.IsConfirmed(ctx, k)
			b, errB := single.IsConfirmed(ctx, k)
			if a != b || errA != nil || errB != nil {
				rt.Fatalf("IsConfirmed(%q): batch store %v/%v, single store %v/%v", k.ID, a, errA, b, errB)
			}
		}
	})
}

// TestRedisBatchMatchesSingles: each answer of a batch equals the
// single-key call's in slice order (see checkBatchAgainstSingles).
func TestRedisBatchMatchesSingles(t *testing.T) {
	t.Parallel()
	o := idempotency.Options{ClaimTTL: time.Hour, Retention: 2 * time.Hour}
	batched, _, _ := newRedisTestStore(t, o)
	single, _, _ := newRedisTestStore(t, o)
	checkBatchAgainstSingles(t, batched, single)
}

// TestRedisBatchRoundTrips: a batch of 64 keys is one round trip per
// operation (one pipeline), a warm script cache assumed.
func TestRedisBatchRoundTrips(t *testing.T) {
	t.Parallel()
	ctx := testwait.Context(t, time.Minute)
	s, client, _ := newRedisTestStore(t, idempotency.Options{})
	var rt redisCounter
	client.AddHook(&rt)
	keys := make([]idempotency.Key, 64)
	for i := range keys {
		keys[i] = idempotency.Key{Namespace: "rt", ID: fmt.Sprint("k-", i)}
	}
	res := make([]idempotency.ClaimResult, len(keys))
	claims := make([]idempotency.Claim, len(keys))
	errs := make([]error, len(keys))
	// Warm up the script cache (EVALSHA answered NOSCRIPT, then EVAL).
	if err := s.TryClaimBatch(ctx, keys[:1], res[:1]); err != nil {
		t.Fatal(err)
	}
	if err := s.ConfirmBatch(ctx, []idempotency.Claim{res[0].Claim}, errs[:1]); err != nil || errs[0] != nil {
		t.Fatal(err, errs[0])
	}
	if err := s.ReleaseBatch(ctx, []idempotency.Claim{res[0].Claim}, errs[:1]); err != nil {
		t.Fatal(err)
	}
	keys = keys[1:]
	res = res[1:]
	claims = claims[1:]
	errs = errs[1:]

	before := rt.n.Load()
	if err := s.TryClaimBatch(ctx, keys, res); err != nil {
		t.Fatal(err)
	}
	if n := rt.n.Load() - before; n != 1 {
		t.Errorf("TryClaimBatch of %d keys: %d round trips, want 1", len(keys), n)
	}
	for i, r := range res {
		if r.Err != nil || r.Outcome != idempotency.Claimed {
			t.Fatalf("key %d: %v, %v", i, r.Outcome, r.Err)
		}
		claims[i] = r.Claim
	}
	half := len(claims) / 2
	before = rt.n.Load()
	if err := s.ConfirmBatch(ctx, claims[:half], errs[:half]); err != nil {
		t.Fatal(err)
	}
	if err := s.ReleaseBatch(ctx, claims[half:], errs[half:]); err != nil {
		t.Fatal(err)
	}
	if n := rt.n.Load() - before; n != 2 {
		t.Errorf("ConfirmBatch + ReleaseBatch: %d round trips, want 2", n)
	}
	for i, err := range errs {
		if err != nil {
			t.Fatalf("claim %d: %v", i, err)
		}
	}
	before = rt.n.Load()
	if err := s.TryClaimBatch(ctx, keys, res); err != nil {
		t.Fatal(err)
	}
	if n := rt.n.Load() - before; n != 1 {
		t.Errorf("second TryClaimBatch: %d round trips, want 1", n)
	}
	for i, r := range res {
		want := idempotency.AlreadyConfirmed
		if i >= half {
			want = idempotency.Claimed
		}
		if r.Err != nil || r.Outcome != want {
			t.Fatalf("key %d after confirm/release: %v, %v; want %v", i, r.Outcome, r.Err, want)
		}
	}
}

// TestRedisBatchScriptCacheFlushed: after SCRIPT FLUSH every batch call
// still answers (EVALSHA's NOSCRIPT is followed by EVAL), on a private
// server so that the shared one's cache is left alone.
func TestRedisBatchScriptCacheFlushed(t *testing.T) {
	t.Parallel()
	addr := startRedisServer(t, false)
	ctx := testwait.Context(t, time.Minute)
	client := redis.NewClient(&redis.Options{Addr: addr})
	t.Cleanup(func() { _ = client.Close() })
	s, err := redisstore.New(ctx, client, redisstore.Options{Prefix: "flush:"})
	if err != nil {
		t.Fatal(err)
	}
	keys := []idempotency.Key{{ID: "1"}, {ID: "2"}, {ID: "1"}}
	res := make([]idempotency.ClaimResult, len(keys))
	for round := range 2 {
		if err := client.ScriptFlush(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		if err := s.TryClaimBatch(ctx, keys, res); err != nil {
			t.Fatal(err)
		}
		want := []idempotency.Outcome{idempotency.Claimed, idempotency.Claimed, idempotency.InProgress}
		if round == 1 {
			want = []idempotency.Outcome{idempotency.AlreadyConfirmed, idempotency.Claimed, idempotency.AlreadyConfirmed}
		}
		for i, r := range res {
			if r.Err != nil || r.Outcome != want[i] {
				t.Fatalf("round %d key %d: %v, %v; want %v", round, i, r.Outcome, r.Err, want[i])
			}
		}
		if err := client.ScriptFlush(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		errs := make([]error, 1)
		c := res[0].Claim
		if round == 1 {
			c = res[1].Claim
		}
		if err := s.ConfirmBatch(ctx, []idempotency.Claim{c}, errs); err != nil || errs[0] != nil {
			t.Fatalf("round %d ConfirmBatch: %v, %v", round, err, errs[0])
		}
		if round == 0 {
			if err := client.ScriptFlush(ctx).Err(); err != nil {
				t.Fatal(err)
			}
			if err := s.ReleaseBatch(ctx, []idempotency.Claim{res[1].Claim}, errs); err != nil || errs[0] != nil {
				t.Fatalf("ReleaseBatch: %v, %v", err, errs[0])
			}
		}
	}
}

// TestRedisBatchFailures: a cancelled context or a closed store fails the
// whole batch before any command is sent; an unreachable server fails it as
// a whole (an error, never a verdict); mismatched slice lengths are refused.
func TestRedisBatchFailures(t *testing.T) {
	t.Parallel()
	s, client, _ := newRedisTestStore(t, idempotency.Options{})
	var rt redisCounter
	client.AddHook(&rt)
	keys := []idempotency.Key{{Namespace: "f", ID: "1"}, {Namespace: "f", ID: "2"}}
	claims := []idempotency.Claim{{Key: keys[0], Token: "t"}, {Key: keys[1], Token: "u"}}
	res := make([]idempotency.ClaimResult, 2)
	errs := make([]error, 2)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := s.TryClaimBatch(ctx, keys, res); !errors.Is(err, context.Canceled) {
		t.Errorf("TryClaimBatch, cancelled: %v", err)
	}
	if err := s.ConfirmBatch(ctx, claims, errs); !errors.Is(err, context.Canceled) {
		t.Errorf("ConfirmBatch, cancelled: %v", err)
	}
	if err := s.ReleaseBatch(ctx, claims, errs); !errors.Is(err, context.Canceled) {
		t.Errorf("ReleaseBatch, cancelled: %v", err)
	}
	if n := rt.n.Load(); n != 0 {
		t.Errorf("%d commands sent with a cancelled context", n)
	}
	live := testwait.Context(t, time.Minute)
	if err := s.TryClaimBatch(live, keys, res[:1]); err == nil {
		t.Error("TryClaimBatch with 1 result for 2 keys: nil error")
	}
	if err := s.ConfirmBatch(live, claims, errs[:1]); err == nil {
		t.Error("ConfirmBatch with 1 error slot for 2 claims: nil error")
	}
	if err := s.ReleaseBatch(live, claims[:1], errs); err == nil {
		t.Error("ReleaseBatch with 2 error slots for 1 claim: nil error")
	}
	// Empty batches are no work.
	if err := s.TryClaimBatch(live, nil, nil); err != nil {
		t.Errorf("empty TryClaimBatch: %v", err)
	}
	if err := s.ConfirmBatch(live, nil, nil); err != nil {
		t.Errorf("empty ConfirmBatch: %v", err)
	}
	if n := rt.n.Load(); n != 0 {
		t.Errorf("%d commands sent for refused or empty batches", n)
	}
	_ = s.Close()
	if err := s.TryClaimBatch(live, keys, res); !errors.Is(err, idempotency.ErrClosed) {
		t.Errorf("TryClaimBatch after Close: %v", err)
	}
	if err := s.ConfirmBatch(live, claims, errs); !errors.Is(err, idempotency.ErrClosed) {
		t.Errorf("ConfirmBatch after Close: %v", err)
	}

	dead := redis.NewClient(&redis.Options{Addr: storetestkit.ClosedAddr(t), MaxRetries: -1, DialerRetries: 1})
	t.Cleanup(func() { _ = dead.Close() })
	ds, err := redisstore.New(live, dead, redisstore.Options{Prefix: "p:"})
	if err != nil {
		t.Fatal(err)
	}
	if err := ds.TryClaimBatch(live, keys, res); err == nil || errors.Is(err, idempotency.ErrInvalidKey) {
		t.Errorf("TryClaimBatch on a closed port: %v, want a connection error", err)
	}
	for name, f := range map[string]func(context.Context, []idempotency.Claim, []error) error{
		"ConfirmBatch": ds.ConfirmBatch, "ReleaseBatch": ds.ReleaseBatch,
	} {
		if err := f(live, claims, errs); err == nil || errors.Is(err, idempotency.ErrClaimLost) {
			t.Errorf("%s on a closed port: %v, want a connection error", name, err)
		}
	}
	// Keys that need no I/O are answered even then.
	bad := []idempotency.Key{{Namespace: "only-namespace"}}
	if err := ds.TryClaimBatch(live, bad, res[:1]); err != nil || !errors.Is(res[0].Err, idempotency.ErrInvalidKey) {
		t.Errorf("TryClaimBatch of an invalid key on a closed port: %v, %v; want ErrInvalidKey in the result", err, res[0].Err)
	}
}
