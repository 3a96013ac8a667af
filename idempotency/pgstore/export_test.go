package pgstore

import (
	"context"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/acemq/msgaudit/idempotency"
)

// Claim gives the external tests the store's atomic two-state claim, which
// is not part of idempotency.Store.
func Claim(ctx context.Context, p *Store, key idempotency.Key) (idempotency.Claim, bool, error) {
	return p.claim(ctx, key)
}

// Pool gives the external tests the store's pool.
func Pool(p *Store) *pgxpool.Pool { return p.pool }

// PurgeSQL gives the external tests the statement of one purge batch
// (its $1 is the batch size, $2 the expires_at to start from).
func PurgeSQL(p *Store) string { return p.sqlPurge }

// IsConfirmedSQL gives the external tests the IsConfirmed statement
// (its $1 is the storage key).
func IsConfirmedSQL(p *Store) string { return p.sqlIsConfirmed }

// PurgeDone is closed once p's automatic purge goroutine has returned.
func PurgeDone(p *Store) <-chan struct{} { return p.core.PurgeDone() }
