package redisstore_test

import (
	"fmt"
	"testing"

	"github.com/acemq/msgaudit/internal/storetestkit"

	"github.com/acemq/msgaudit/idempotency"
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
