package redisstore

import (
	"context"

	"github.com/acemq/msgaudit/idempotency"
)

// Claim gives the external tests the store's atomic two-state claim, which
// is not part of idempotency.Store.
func Claim(ctx context.Context, s *Store, key idempotency.Key) (idempotency.Claim, bool, error) {
	return s.claim(ctx, key)
}
