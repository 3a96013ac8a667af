// Package pgstore is the PostgreSQL backend of package idempotency (pgx
// v5): a store on one table, shared by several consumer machines and kept
// with the server's clock.
//
// Importing it registers the "postgres" and "postgresql" schemes with
// idempotency.Open:
//
//	import _ "github.com/acemq/msgaudit/idempotency/pgstore"
//
//	s, err := idempotency.Open(ctx, "postgres://app@db/app", idempotency.Options{})
//
// New builds a store on a pool the caller made; Open connects from a URL.
package pgstore

import "github.com/acemq/msgaudit/idempotency"

func init() {
	idempotency.Register("postgres", openPostgresURL)
	idempotency.Register("postgresql", openPostgresURL)
}
