package storetest

import (
	"context"
	"runtime"
	"strconv"
	"sync/atomic"
	"testing"

	"github.com/acemq/msgaudit/idempotency"
)

// The benchmarks every backend runs, so all stores are measured the same
// way. Each runs with a cancellable context, as a consumer's calls do (a
// driver may pay for watching it).

// benchKey formats message number n as a consumer would have its id: a
// fresh string in a reused buffer.
func benchKey(buf []byte, n uint64) ([]byte, idempotency.Key) {
	buf = strconv.AppendUint(append(buf[:0], "ID:bench-host-1-2:1:1:"...), n, 10)
	return buf, idempotency.Key{Namespace: "bench", ID: string(buf)}
}

// BenchPairs measures TryClaim + Confirm pairs, each on a new key, from
// one goroutine or from RunParallel with enough parallelism for goroutines
// goroutines. Every purgeEvery pairs (0: never) purge runs outside the
// timer, so stores with a short retention measure a steady state instead
// of an ever-growing table. It reports pairs/s and, where the platform
// tells, cpu-ns/op.
func BenchPairs(b *testing.B, s idempotency.Store, goroutines int, purgeEvery uint64, purge func()) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var next atomic.Uint64
	pair := func(buf []byte) []byte {
		n := next.Add(1)
		if purgeEvery > 0 && n%purgeEvery == 0 {
			b.StopTimer()
			purge()
			b.StartTimer()
		}
		buf, k := benchKey(buf, n)
		out, c, err := s.TryClaim(ctx, k)
		if err != nil || out != idempotency.Claimed {
			b.Fatalf("TryClaim = %v, %v", out, err)
		}
		if err := s.Confirm(ctx, c); err != nil {
			b.Fatal(err)
		}
		return buf
	}
	m := startBench(b)
	if goroutines == 1 {
		var buf []byte
		for range b.N {
			buf = pair(buf)
		}
	} else {
		procs := runtime.GOMAXPROCS(0)
		b.SetParallelism((goroutines + procs - 1) / procs)
		b.RunParallel(func(pb *testing.PB) {
			var buf []byte
			for pb.Next() {
				buf = pair(buf)
			}
		})
	}
	m.stop("pairs/s")
}

// BenchBatchPairs measures the same work as BenchPairs with one goroutine,
// in batches: TryClaimBatch of size new keys, then ConfirmBatch of their
// claims. b.N counts keys, so ns/op is per key and compares with
// BenchPairs' per pair.
func BenchBatchPairs(b *testing.B, s idempotency.BatchStore, size int) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	keys := make([]idempotency.Key, size)
	res := make([]idempotency.ClaimResult, size)
	claims := make([]idempotency.Claim, size)
	errs := make([]error, size)
	var buf []byte
	var n uint64
	m := startBench(b)
	for done := 0; done < b.N; done += size {
		k := min(size, b.N-done)
		for i := range k {
			n++
			buf, keys[i] = benchKey(buf, n)
		}
		if err := s.TryClaimBatch(ctx, keys[:k], res[:k]); err != nil {
			b.Fatal(err)
		}
		for i := range k {
			if res[i].Err != nil || res[i].Outcome != idempotency.Claimed {
				b.Fatalf("TryClaimBatch[%d] = %v, %v", i, res[i].Outcome, res[i].Err)
			}
			claims[i] = res[i].Claim
		}
		if err := s.ConfirmBatch(ctx, claims[:k], errs[:k]); err != nil {
			b.Fatal(err)
		}
		for i := range k {
			if errs[i] != nil {
				b.Fatalf("ConfirmBatch[%d]: %v", i, errs[i])
			}
		}
	}
	m.stop("pairs/s")
}

// BenchDuplicate measures TryClaim of a confirmed key, the redelivery
// path. It closes s.
func BenchDuplicate(b *testing.B, s idempotency.Store) {
	defer s.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	key := idempotency.Key{Namespace: "bench", ID: "ID:bench-host-1-2:1:1:1"}
	_, c, err := s.TryClaim(ctx, key)
	if err != nil {
		b.Fatal(err)
	}
	if err := s.Confirm(ctx, c); err != nil {
		b.Fatal(err)
	}
	m := startBench(b)
	for range b.N {
		if out, _, err := s.TryClaim(ctx, key); err != nil || out != idempotency.AlreadyConfirmed {
			b.Fatalf("TryClaim = %v, %v", out, err)
		}
	}
	m.stop("checks/s")
}

type benchMeter struct {
	b     *testing.B
	cpu0  int64
	cpuOK bool
}

func startBench(b *testing.B) benchMeter {
	b.ReportAllocs()
	cpu0, ok := processCPU()
	b.ResetTimer()
	return benchMeter{b: b, cpu0: cpu0, cpuOK: ok}
}

// stop reports the rate in unit and the CPU time per op. CPU time includes
// untimed purges' and the GC's: an upper bound of the store's cost that
// other processes on the machine do not inflate the way they inflate
// ns/op.
func (m benchMeter) stop(unit string) {
	m.b.StopTimer()
	if sec := m.b.Elapsed().Seconds(); sec > 0 {
		m.b.ReportMetric(float64(m.b.N)/sec, unit)
	}
	if cpu1, ok := processCPU(); ok && m.cpuOK {
		m.b.ReportMetric(float64(cpu1-m.cpu0)/float64(m.b.N), "cpu-ns/op")
	}
}
