package pgstore_test

import (
	"fmt"
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
