package pgstore_test

import (
	"fmt"
	"testing"

	"github.com/acemq/msgaudit/internal/testkit/storetestkit"

	"github.com/acemq/msgaudit/idempotency"
	"github.com/acemq/msgaudit/idempotency/storetest"
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
// goroutine on a pool of 4 connections, single-key calls (size=1:
// TryClaim and Confirm per key) against TryClaimBatch + ConfirmBatch of
// size keys (storetest.BenchBatchPairs: b.N counts keys, so ns/op and
// allocs/op are per key in every row).
func BenchmarkPostgresBatchPairs(b *testing.B) {
	for _, size := range []int{1, 10, 64} {
		b.Run(fmt.Sprintf("size=%d", size), func(b *testing.B) {
			s, _, _ := newPostgresTestStore(b, idempotency.Options{}, nil, 4)
			if size == 1 {
				storetest.BenchPairs(b, s, 1, 0, nil)
				return
			}
			storetest.BenchBatchPairs(b, s, size)
		})
	}
}
