package redisstore_test

import (
	"context"
	"fmt"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/acemq/msgaudit/idempotency"
	"github.com/acemq/msgaudit/internal/testwait"
)

// remoteBenchPairs measures TryClaim + Confirm pairs on s from goroutines
// goroutines (1: a plain loop; more: RunParallel with enough parallelism
// for at least that many), each pair on a new key. It reports pairs/s and
// round-trips/op, where roundTrips counts what the store sent.
func remoteBenchPairs(b *testing.B, s idempotency.Store, goroutines int, roundTrips func() int64) {
	ctx := context.Background()
	var next atomic.Uint64
	pair := func(id []byte) {
		n := next.Add(1)
		id = strconv.AppendUint(id[:0], n, 10)
		out, c, err := s.TryClaim(ctx, idempotency.Key{Namespace: "bench", ID: string(id)})
		if err != nil || out != idempotency.Claimed {
			b.Fatalf("TryClaim = %v, %v", out, err)
		}
		if err := s.Confirm(ctx, c); err != nil {
			b.Fatal(err)
		}
	}
	// Warm up connections and statement/script caches outside the timer,
	// with as many goroutines as the measurement so the pool grows now.
	var wg sync.WaitGroup
	for range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 4 {
				pair(nil)
			}
		}()
	}
	testwait.Group(b, &wg, time.Minute, "the end of the warm-up goroutines")
	b.ReportAllocs()
	before := roundTrips()
	b.ResetTimer()
	if goroutines == 1 {
		var id []byte
		for range b.N {
			pair(id)
		}
	} else {
		procs := runtime.GOMAXPROCS(0)
		b.SetParallelism((goroutines + procs - 1) / procs)
		b.RunParallel(func(pb *testing.PB) {
			var id []byte
			for pb.Next() {
				pair(id)
			}
		})
	}
	b.StopTimer()
	if sec := b.Elapsed().Seconds(); sec > 0 {
		b.ReportMetric(float64(b.N)/sec, "pairs/s")
	}
	b.ReportMetric(float64(roundTrips()-before)/float64(b.N), "round-trips/op")
}

// BenchmarkRedisTryClaimConfirm: one try-claim + confirm pair per message
// against MSGAUDIT_REDIS_URL. round-trips/op counts commands sent (2 per
// pair: one EVALSHA each).
func BenchmarkRedisTryClaimConfirm(b *testing.B) {
	for _, g := range []int{1, 16} {
		b.Run(fmt.Sprintf("goroutines=%d", g), func(b *testing.B) {
			s, client, _ := newRedisTestStore(b, idempotency.Options{})
			var rt redisCounter
			client.AddHook(&rt)
			remoteBenchPairs(b, s, g, rt.n.Load)
		})
	}
}

// remoteBenchDuplicate measures TryClaim on an already confirmed key (the
// redelivery path) on s, from one goroutine.
func remoteBenchDuplicate(b *testing.B, s idempotency.Store, roundTrips func() int64) {
	ctx := context.Background()
	key := idempotency.Key{Namespace: "bench", ID: "duplicate"}
	_, c, err := s.TryClaim(ctx, key)
	if err != nil {
		b.Fatal(err)
	}
	if err := s.Confirm(ctx, c); err != nil {
		b.Fatal(err)
	}
	for range 4 {
		if _, _, err := s.TryClaim(ctx, key); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportAllocs()
	before := roundTrips()
	b.ResetTimer()
	for range b.N {
		out, _, err := s.TryClaim(ctx, key)
		if err != nil || out != idempotency.AlreadyConfirmed {
			b.Fatalf("TryClaim = %v, %v", out, err)
		}
	}
	b.StopTimer()
	if sec := b.Elapsed().Seconds(); sec > 0 {
		b.ReportMetric(float64(b.N)/sec, "checks/s")
	}
	b.ReportMetric(float64(roundTrips()-before)/float64(b.N), "round-trips/op")
}

// BenchmarkRedisTryClaimDuplicate: TryClaim of a confirmed key.
func BenchmarkRedisTryClaimDuplicate(b *testing.B) {
	s, client, _ := newRedisTestStore(b, idempotency.Options{})
	var rt redisCounter
	client.AddHook(&rt)
	remoteBenchDuplicate(b, s, rt.n.Load)
}
