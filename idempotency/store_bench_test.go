package idempotency_test

import (
	"context"
	"fmt"
	"runtime"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/acemq/msgaudit/idempotency"
)

// benchPairs measures TryClaim + Confirm pairs, each on a new key (the
// message id formatted into a fresh string, as a consumer would have it),
// from one goroutine or from RunParallel with enough parallelism for
// goroutines goroutines. Every purgeEvery pairs (0: never) purge runs
// outside the timer, so stores with a short retention measure a steady
// state instead of an ever-growing table. It reports pairs/s.
func benchPairs(b *testing.B, s idempotency.Store, goroutines int, purgeEvery uint64, purge func()) {
	ctx := context.Background()
	var next atomic.Uint64
	pair := func(id []byte) []byte {
		n := next.Add(1)
		if purgeEvery > 0 && n%purgeEvery == 0 {
			b.StopTimer()
			purge()
			b.StartTimer()
		}
		id = strconv.AppendUint(append(id[:0], "ID:bench-host-1-2:1:1:"...), n, 10)
		out, c, err := s.TryClaim(ctx, idempotency.Key{Namespace: "bench", ID: string(id)})
		if err != nil || out != idempotency.Claimed {
			b.Fatalf("TryClaim = %v, %v", out, err)
		}
		if err := s.Confirm(ctx, c); err != nil {
			b.Fatal(err)
		}
		return id
	}
	b.ReportAllocs()
	cpu0, cpuOK := processCPU()
	b.ResetTimer()
	if goroutines == 1 {
		var id []byte
		for range b.N {
			id = pair(id)
		}
	} else {
		procs := runtime.GOMAXPROCS(0)
		b.SetParallelism((goroutines + procs - 1) / procs)
		b.RunParallel(func(pb *testing.PB) {
			var id []byte
			for pb.Next() {
				id = pair(id)
			}
		})
	}
	b.StopTimer()
	if sec := b.Elapsed().Seconds(); sec > 0 {
		b.ReportMetric(float64(b.N)/sec, "pairs/s")
	}
	// CPU time includes the untimed purges' and the GC's: an upper bound
	// of the store's cost that other processes on the machine do not
	// inflate the way they inflate ns/op.
	if cpu1, ok := processCPU(); ok && cpuOK {
		b.ReportMetric(float64(cpu1-cpu0)/float64(b.N), "cpu-ns/op")
	}
}

// BenchmarkMemoryTryClaimConfirm: the memory store's target is ≥ 2 M pairs/s on
// one core (run with -cpu=1). Retention is 1 ns and a purge (outside the
// timer) runs every `retained` pairs, so the store holds up to that many
// keys: 16 Ki (hot in cache) or 1 Mi (a large store, cache misses).
func BenchmarkMemoryTryClaimConfirm(b *testing.B) {
	for _, retained := range []uint64{1 << 14, 1 << 20} {
		for _, g := range []int{1, 16} {
			b.Run(fmt.Sprintf("retained=%d/goroutines=%d", retained, g), func(b *testing.B) {
				m := idempotency.NewMemory(idempotency.Options{Retention: time.Nanosecond})
				defer m.Close()
				benchPairs(b, m, g, retained, func() { m.Purge() })
			})
		}
	}
}

// BenchmarkMemoryTryClaimDuplicate: TryClaim of a confirmed key, the
// redelivery path.
func BenchmarkMemoryTryClaimDuplicate(b *testing.B) {
	benchDuplicate(b, idempotency.NewMemory(idempotency.Options{}))
}

func benchDuplicate(b *testing.B, s idempotency.Store) {
	defer s.Close()
	ctx := context.Background()
	key := idempotency.Key{Namespace: "bench", ID: "ID:bench-host-1-2:1:1:1"}
	_, c, err := s.TryClaim(ctx, key)
	if err != nil {
		b.Fatal(err)
	}
	if err := s.Confirm(ctx, c); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	cpu0, cpuOK := processCPU()
	b.ResetTimer()
	for range b.N {
		if out, _, err := s.TryClaim(ctx, key); err != nil || out != idempotency.AlreadyConfirmed {
			b.Fatalf("TryClaim = %v, %v", out, err)
		}
	}
	b.StopTimer()
	if sec := b.Elapsed().Seconds(); sec > 0 {
		b.ReportMetric(float64(b.N)/sec, "checks/s")
	}
	if cpu1, ok := processCPU(); ok && cpuOK {
		b.ReportMetric(float64(cpu1-cpu0)/float64(b.N), "cpu-ns/op")
	}
}
