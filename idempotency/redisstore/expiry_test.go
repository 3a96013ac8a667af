package redisstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/acemq/msgaudit/idempotency"
	"github.com/acemq/msgaudit/idempotency/redisstore"
)

// pauseMS is how long the server holds writes in TestRedisClaimExpiryDatedBeforeCall;
// other tests share the server, so it stays short.
const pauseMS = 300

// TestRedisClaimExpiryDatedBeforeCall: a claim's Expires is the local time
// before the call plus the claim TTL, never a time taken after the reply.
// Another client pauses the server's writes (CLIENT PAUSE WRITE) just
// before each call, so the call waits about pauseMS ms; a claim dated
// after the round trip would overstate its lease by that wait, and its
// owner would go on working after the server had let another owner in.
// Each kind of call that returns an Expires is checked: TryClaim,
// TryClaimBatch, the two-state claim and Renew.
func TestRedisClaimExpiryDatedBeforeCall(t *testing.T) {
	const ttl = time.Minute
	s, _, _ := newRedisTestStore(t, idempotency.Options{ClaimTTL: ttl})
	opt, err := redis.ParseURL(redisTestURL(t))
	if err != nil {
		t.Fatal(err)
	}
	pauser := redis.NewClient(opt)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := pauser.Do(ctx, "CLIENT", "UNPAUSE").Err(); err != nil {
			t.Errorf("CLIENT UNPAUSE: %v", err)
		}
		_ = pauser.Close()
	})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	// paused runs call with the server's writes paused from the other
	// client and checks the Expires it returns against the time before
	// the call.
	paused := func(t *testing.T, call func() (time.Time, error)) {
		t.Helper()
		if err := pauser.Do(ctx, "CLIENT", "PAUSE", pauseMS, "WRITE").Err(); err != nil {
			t.Fatalf("CLIENT PAUSE: %v", err)
		}
		before := time.Now()
		expires, err := call()
		took := time.Since(before)
		if err != nil {
			t.Fatal(err)
		}
		if took < pauseMS*time.Millisecond/2 {
			t.Fatalf("the call took %v; the server's pause of %d ms did not hold it", took, pauseMS)
		}
		// A correct store dates the claim microseconds after before; one
		// that dates it after the reply is late by about the whole call.
		if late := expires.Sub(before.Add(ttl)); late > took/4 {
			t.Fatalf("Expires is %v after the time before the call plus the TTL (the call took %v): the claim is dated after the round trip", late, took)
		}
	}
	key := func(id string) idempotency.Key { return idempotency.Key{Namespace: "expiry", ID: id} }

	t.Run("TryClaim", func(t *testing.T) {
		paused(t, func() (time.Time, error) {
			out, c, err := s.TryClaim(ctx, key("single"))
			if err == nil && out != idempotency.Claimed {
				t.Fatalf("TryClaim = %v", out)
			}
			return c.Expires, err
		})
	})
	t.Run("TryClaimBatch", func(t *testing.T) {
		keys := []idempotency.Key{key("b1"), key("b2"), key("b3")}
		res := make([]idempotency.ClaimResult, len(keys))
		paused(t, func() (time.Time, error) {
			err := s.TryClaimBatch(ctx, keys, res)
			var latest time.Time
			for i, r := range res {
				if err == nil && (r.Err != nil || r.Outcome != idempotency.Claimed) {
					t.Fatalf("key %d: %v, %v", i, r.Outcome, r.Err)
				}
				if r.Claim.Expires.After(latest) {
					latest = r.Claim.Expires
				}
			}
			return latest, err
		})
	})
	t.Run("Claim", func(t *testing.T) {
		paused(t, func() (time.Time, error) {
			c, ok, err := redisstore.Claim(ctx, s, key("two-state"))
			if err == nil && !ok {
				t.Fatal("claim refused")
			}
			return c.Expires, err
		})
	})
	t.Run("Renew", func(t *testing.T) {
		_, c, err := s.TryClaim(ctx, key("renewed"))
		if err != nil {
			t.Fatal(err)
		}
		paused(t, func() (time.Time, error) {
			c, err := s.Renew(ctx, c)
			return c.Expires, err
		})
	})
}
