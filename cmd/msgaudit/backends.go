package main

// The command opens stores by URL: link in every backend.
import (
	_ "github.com/acemq/msgaudit/idempotency/pgstore"
	_ "github.com/acemq/msgaudit/idempotency/redisstore"
	_ "github.com/acemq/msgaudit/idempotency/sqlitestore"
)
