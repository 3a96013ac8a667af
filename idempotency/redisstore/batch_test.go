package redisstore_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/acemq/msgaudit/idempotency"
	"github.com/acemq/msgaudit/idempotency/redisstore"
	"github.com/acemq/msgaudit/internal/testkit/storetestkit"
	"github.com/acemq/msgaudit/internal/testkit/testwait"
)

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
