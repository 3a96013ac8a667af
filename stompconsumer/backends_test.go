package stompconsumer_test

// The tests open stores by URL; link in the backends they name.
import (
	_ "github.com/acemq/msgaudit/idempotency/pgstore"
	_ "github.com/acemq/msgaudit/idempotency/redisstore"
	_ "github.com/acemq/msgaudit/idempotency/sqlitestore"
)
