package redisstore_test

import (
	"context"
	"fmt"
	"strconv"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/acemq/msgaudit/idempotency"
	"github.com/acemq/msgaudit/idempotency/redisstore"
	"github.com/acemq/msgaudit/internal/redisconn"
	"github.com/acemq/msgaudit/internal/testkit/storetestkit"
)

// BenchmarkRedisTryClaimConfirm: one try-claim + confirm pair per message
// against MSGAUDIT_REDIS_URL. round-trips/op counts commands sent (2 per
// pair: one EVALSHA each).
func BenchmarkRedisTryClaimConfirm(b *testing.B) {
	for _, g := range []int{1, 16} {
		b.Run(fmt.Sprintf("goroutines=%d", g), func(b *testing.B) {
			s, client, _ := newRedisTestStore(b, idempotency.Options{})
			var rt redisCounter
			client.AddHook(&rt)
			storetestkit.BenchPairs(b, s, g, rt.n.Load)
		})
	}
}

// BenchmarkRedisTryClaimDuplicate: TryClaim of a confirmed key.
func BenchmarkRedisTryClaimDuplicate(b *testing.B) {
	s, client, _ := newRedisTestStore(b, idempotency.Options{})
	var rt redisCounter
	client.AddHook(&rt)
	storetestkit.BenchDuplicate(b, s, rt.n.Load)
}

// BenchmarkRedisBatch: try-claim + confirm of new keys, one goroutine,
// through the single-key calls (size=1) or TryClaimBatch + ConfirmBatch of
// size keys. One op is one key, so ns/op, B/op and allocs/op are per key
// and the sizes compare directly; round-trips/op counts pipelines and
// commands sent per key.
func BenchmarkRedisBatch(b *testing.B) {
	for _, size := range []int{1, 10, 64} {
		b.Run(fmt.Sprintf("size=%d", size), func(b *testing.B) {
			s, client, _ := newRedisTestStore(b, idempotency.Options{})
			var rt redisCounter
			client.AddHook(&rt)
			benchBatch(b, s, size, rt.n.Load)
		})
	}
}

// benchBatch is BenchmarkRedisBatch's body for one store and size;
// roundTrips counts what the store sent.
func benchBatch(b *testing.B, s *redisstore.Store, size int, roundTrips func() int64) {
	ctx := context.Background()
	keys := make([]idempotency.Key, size)
	res := make([]idempotency.ClaimResult, size)
	claims := make([]idempotency.Claim, size)
	errs := make([]error, size)
	next := 0
	round := func(n int) {
		for i := range n {
			next++
			keys[i] = idempotency.Key{Namespace: "bench", ID: strconv.Itoa(next)}
		}
		if size == 1 {
			out, c, err := s.TryClaim(ctx, keys[0])
			if err != nil || out != idempotency.Claimed {
				b.Fatalf("TryClaim = %v, %v", out, err)
			}
			if err := s.Confirm(ctx, c); err != nil {
				b.Fatal(err)
			}
			return
		}
		if err := s.TryClaimBatch(ctx, keys[:n], res[:n]); err != nil {
			b.Fatal(err)
		}
		for i := range n {
			if res[i].Err != nil || res[i].Outcome != idempotency.Claimed {
				b.Fatalf("key %d: %v, %v", i, res[i].Outcome, res[i].Err)
			}
			claims[i] = res[i].Claim
		}
		if err := s.ConfirmBatch(ctx, claims[:n], errs[:n]); err != nil {
			b.Fatal(err)
		}
		for i := range n {
			if errs[i] != nil {
				b.Fatal(errs[i])
			}
		}
	}
	for range 4 { // warm up the connection and the script cache
		round(size)
	}
	b.ReportAllocs()
	before := roundTrips()
	b.ResetTimer()
	for done := 0; done < b.N; done += size {
		round(min(size, b.N-done))
	}
	b.StopTimer()
	if sec := b.Elapsed().Seconds(); sec > 0 {
		b.ReportMetric(float64(b.N)/sec, "keys/s")
	}
	b.ReportMetric(float64(roundTrips()-before)/float64(b.N), "round-trips/op")
}

// BenchmarkClusterBatch is BenchmarkRedisBatch on the test cluster
// (MSGAUDIT_REDIS_CLUSTER_URL), where a batch's pipeline is split into one
// per master. round-trips/op counts the cluster client's commands and
// pipelines: a pipeline once, however many masters it reaches.
func BenchmarkClusterBatch(b *testing.B) {
	for _, size := range []int{1, 10, 64} {
		b.Run(fmt.Sprintf("size=%d", size), func(b *testing.B) {
			storetestkit.LockService(b, clusterLock, false)
			cfg, err := redisconn.Parse(clusterTestURL(b))
			if err != nil {
				b.Fatal(err)
			}
			client := cfg.NewClient().(*redis.ClusterClient)
			b.Cleanup(func() { _ = client.Close() })
			prefix := "msgaudit-test:" + storetestkit.Hex(8) + ":"
			b.Cleanup(func() { clusterDeletePrefix(b, client, prefix) })
			var rt redisCounter
			client.AddHook(&rt)
			s, err := redisstore.New(context.Background(), client, redisstore.Options{Prefix: prefix})
			if err != nil {
				b.Fatal(err)
			}
			benchBatch(b, s, size, rt.n.Load)
		})
	}
}
