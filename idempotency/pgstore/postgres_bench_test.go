package pgstore_test

import (
	"context"
	"fmt"
	"runtime"
	"strconv"
	"testing"

	"github.com/acemq/msgaudit/internal/storetestkit"

	"github.com/acemq/msgaudit/idempotency"
)

// BenchmarkPostgresTryClaimConfirm: one try-claim + confirm pair per message
// against MSGAUDIT_POSTGRES_URL, on a pool of 16 connections.
// round-trips/op counts statements sent (2 per pair); prepares happen only
// during the warm-up.
func BenchmarkPostgresTryClaimConfirm(b *testing.B) {
	for _, g := range []int{1, 16} {
		b.Run(fmt.Sprintf("goroutines=%d", g), func(b *testing.B) {
			var tr pgCounter
			tr.noSQL = true
			s, _, _ := newPostgresTestStore(b, idempotency.Options{}, &tr, 16)
			storetestkit.BenchPairs(b, s, g, func() int64 { return tr.queries.Load() + tr.prepares.Load() })
		})
	}
}

// BenchmarkPostgresTryClaimDuplicate: TryClaim of a confirmed key, which
// must stay a read (no row lock, no commit flush).
func BenchmarkPostgresTryClaimDuplicate(b *testing.B) {
	var tr pgCounter
	tr.noSQL = true
	s, _, _ := newPostgresTestStore(b, idempotency.Options{}, &tr, 1)
	storetestkit.BenchDuplicate(b, s, func() int64 { return tr.queries.Load() + tr.prepares.Load() })
}

// BenchmarkPostgresBatchPairs: try-claim + confirm of new keys from one
// goroutine, single-key calls (size=1: TryClaim and Confirm per key) against
// TryClaimBatch + ConfirmBatch of size keys. One op is one batch; ns/key
// and allocs/key divide by the keys it covers, round-trips/key counts the
// statements sent.
func BenchmarkPostgresBatchPairs(b *testing.B) {
	for _, size := range []int{1, 10, 64} {
		b.Run(fmt.Sprintf("size=%d", size), func(b *testing.B) {
			var tr pgCounter
			tr.noSQL = true
			s, _, _ := newPostgresTestStore(b, idempotency.Options{}, &tr, 4)
			ctx := context.Background()
			var next int
			keys := make([]idempotency.Key, size)
			res := make([]idempotency.ClaimResult, size)
			claims := make([]idempotency.Claim, size)
			errs := make([]error, size)
			round := func() {
				for i := range keys {
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
				if err := s.TryClaimBatch(ctx, keys, res); err != nil {
					b.Fatal(err)
				}
				for i, r := range res {
					if r.Err != nil || r.Outcome != idempotency.Claimed {
						b.Fatalf("key %d: %v, %v", i, r.Outcome, r.Err)
					}
					claims[i] = r.Claim
				}
				if err := s.ConfirmBatch(ctx, claims, errs); err != nil {
					b.Fatal(err)
				}
				for _, err := range errs {
					if err != nil {
						b.Fatal(err)
					}
				}
			}
			for range 4 {
				round()
			}
			b.ReportAllocs()
			before := tr.queries.Load() + tr.prepares.Load()
			var ms0, ms1 runtime.MemStats
			runtime.ReadMemStats(&ms0)
			b.ResetTimer()
			for range b.N {
				round()
			}
			b.StopTimer()
			runtime.ReadMemStats(&ms1)
			keysDone := float64(b.N * size)
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/keysDone, "ns/key")
			b.ReportMetric(float64(ms1.Mallocs-ms0.Mallocs)/keysDone, "allocs/key")
			b.ReportMetric(float64(tr.queries.Load()+tr.prepares.Load()-before)/keysDone, "round-trips/key")
		})
	}
}
