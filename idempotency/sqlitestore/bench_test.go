package sqlitestore_test

import (
	"context"
	"fmt"
	"path/filepath"
	"runtime"
	"strconv"
	"sync/atomic"
	"testing"

	"github.com/acemq/msgaudit/idempotency"
	"github.com/acemq/msgaudit/idempotency/sqlitestore"
)

// benchPairs and benchDuplicate are the helpers of the idempotency
// package's memory-store benchmarks, copied so both measure the same way.
//
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

// BenchmarkSQLiteTryClaimConfirm: pairs on a file in b.TempDir(), with the
// default synchronous=FULL (two disk syncs per pair: the claim's commit
// and the confirmation's) and with synchronous=NORMAL (WAL syncs only at
// checkpoints).
func BenchmarkSQLiteTryClaimConfirm(b *testing.B) {
	for _, sync := range []string{"full", "normal"} {
		for _, g := range []int{1, 16} {
			b.Run(fmt.Sprintf("sync=%s/goroutines=%d", sync, g), func(b *testing.B) {
				path := filepath.Join(b.TempDir(), "bench.db")
				if sync == "normal" {
					path += "?_pragma=synchronous(NORMAL)"
				}
				s, err := sqlitestore.Open(context.Background(), path, idempotency.Options{})
				if err != nil {
					b.Fatal(err)
				}
				defer s.Close()
				benchPairs(b, s, g, 0, nil)
			})
		}
	}
}

// BenchmarkSQLiteTryClaimDuplicate: TryClaim of a confirmed key (one read).
func BenchmarkSQLiteTryClaimDuplicate(b *testing.B) {
	s, err := sqlitestore.Open(context.Background(), filepath.Join(b.TempDir(), "bench.db"), idempotency.Options{})
	if err != nil {
		b.Fatal(err)
	}
	benchDuplicate(b, s)
}
