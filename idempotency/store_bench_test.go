package idempotency_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/acemq/msgaudit/idempotency"
	"github.com/acemq/msgaudit/idempotency/storetest"
)

// BenchmarkMemoryTryClaimConfirm: the memory store's target is ≥ 2 M pairs/s on
// one core (run with -cpu=1). Retention is 1 ns and a purge (outside the
// timer) runs every `retained` pairs, so the store holds up to that many
// keys: 16 Ki (hot in cache) or 1 Mi (a large store, cache misses).
func BenchmarkMemoryTryClaimConfirm(b *testing.B) {
	for _, retained := range []uint64{1 << 14, 1 << 20} {
		for _, g := range []int{1, 16} {
			b.Run(fmt.Sprintf("retained=%d/goroutines=%d", retained, g), func(b *testing.B) {
				m := memStore(b, idempotency.Options{Retention: time.Nanosecond})
				defer m.Close()
				storetest.BenchPairs(b, m, g, retained, func() { m.Purge() })
			})
		}
	}
}

// BenchmarkMemoryTryClaimDuplicate: TryClaim of a confirmed key, the
// redelivery path.
func BenchmarkMemoryTryClaimDuplicate(b *testing.B) {
	storetest.BenchDuplicate(b, memStore(b, idempotency.Options{}))
}
