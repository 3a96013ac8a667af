package main

// The command opens stores by URL: link in every backend.
import (
	_ "github.com/acemq/msgaudit/idempotency/pgstore"
	_ "github.com/acemq/msgaudit/idempotency/redisstore"
	_ "github.com/acemq/msgaudit/idempotency/sqlitestore"
)

import (
	_ "github.com/acemq/msgaudit/metadata/pgmeta"
	_ "github.com/acemq/msgaudit/metadata/redismeta"
	_ "github.com/acemq/msgaudit/metadata/sqlitemeta"
)
