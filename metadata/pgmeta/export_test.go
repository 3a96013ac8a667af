package pgmeta

import "github.com/jackc/pgx/v5/pgxpool"

// Pool gives the external tests the store's pool.
func Pool(s *Store) *pgxpool.Pool { return s.pool }
