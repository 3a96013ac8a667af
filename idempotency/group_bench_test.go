package idempotency_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/acemq/msgaudit/idempotency"
	"github.com/acemq/msgaudit/idempotency/storetest"
)

// slowStore is a BatchStore over a Memory that takes latency for every
// call, single or batch, one call at a time: a store behind one
// connection or one writer (SQLite), whose round trip or commit dominates.
type slowStore struct {
	*idempotency.Memory
	latency time.Duration
	mu      *sync.Mutex
}

func (s slowStore) wait() {
	s.mu.Lock()
	time.Sleep(s.latency)
	s.mu.Unlock()
}

func (s slowStore) TryClaim(ctx context.Context, k idempotency.Key) (idempotency.Outcome, idempotency.Claim, error) {
	s.wait()
	return s.Memory.TryClaim(ctx, k)
}

func (s slowStore) Confirm(ctx context.Context, c idempotency.Claim) error {
	s.wait()
	return s.Memory.Confirm(ctx, c)
}

func (s slowStore) TryClaimBatch(ctx context.Context, keys []idempotency.Key, res []idempotency.ClaimResult) error {
	s.wait()
	return s.Memory.TryClaimBatch(ctx, keys, res)
}

func (s slowStore) ConfirmBatch(ctx context.Context, claims []idempotency.Claim, errs []error) error {
	s.wait()
	return s.Memory.ConfirmBatch(ctx, claims, errs)
}

func (s slowStore) ReleaseBatch(ctx context.Context, claims []idempotency.Claim, errs []error) error {
	s.wait()
	return s.Memory.ReleaseBatch(ctx, claims, errs)
}

// BenchmarkGroup measures TryClaim + Confirm pairs on new keys, straight
// to the store ("single") and through Group with its defaults
// ("grouped") or a Linger, from one goroutine (a lone caller: what Group
// costs when there is nothing to group) and from 16 or 64 goroutines
// (b.RunParallel; run with -cpu 1,2). On the memory store the batch calls
// save nothing, so this is Group's overhead; on the slow store (200µs per
// call, batch or not, one call at a time) it is the amortisation.
func BenchmarkGroup(b *testing.B) {
	for _, store := range []string{"memory", "slow"} {
		for _, mode := range []string{"single", "grouped", "linger=100us"} {
			for _, g := range []int{1, 16, 64} {
				b.Run(fmt.Sprintf("store=%s/%s/goroutines=%d", store, mode, g), func(b *testing.B) {
					m := memStore(b, idempotency.Options{Retention: time.Nanosecond})
					var s idempotency.Store = m
					if store == "slow" {
						s = slowStore{Memory: m, latency: 200 * time.Microsecond, mu: new(sync.Mutex)}
					}
					switch mode {
					case "grouped":
						s = group(b, s, idempotency.GroupOptions{})
					case "linger=100us":
						s = group(b, s, idempotency.GroupOptions{Linger: 100 * time.Microsecond})
					}
					defer s.Close()
					storetest.BenchPairs(b, s, g, 1<<14, func() { m.Purge() })
				})
			}
		}
	}
}

// BenchmarkGroupDuplicate: a TryClaim of a confirmed key through Group
// from one goroutine, the redelivery path's cost when nothing groups.
func BenchmarkGroupDuplicate(b *testing.B) {
	storetest.BenchDuplicate(b, group(b, memStore(b, idempotency.Options{}), idempotency.GroupOptions{}))
}
