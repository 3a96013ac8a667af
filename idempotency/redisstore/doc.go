// Package redisstore is the Redis backend of package idempotency (go-redis
// v9): a store shared by several consumer machines, kept with the Redis
// server's clock.
//
// Importing it registers the "redis" and "rediss" schemes with
// idempotency.Open:
//
//	import _ "github.com/acemq/msgaudit/idempotency/redisstore"
//
//	s, err := idempotency.Open(ctx, "redis://127.0.0.1:6379/0", idempotency.Options{})
//
// New builds a store on a client the caller made; Open connects from a URL
// (and accepts a TLS configuration a URL cannot express).
package redisstore

import "github.com/acemq/msgaudit/idempotency"

func init() {
	idempotency.Register("redis", openRedisURL)
	idempotency.Register("rediss", openRedisURL)
}
