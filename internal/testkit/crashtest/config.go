package crashtest

import (
	"encoding/json"
	"fmt"
	"os"
	"time"
)

// Transports a Config can name.
const (
	// STOMP is stompconsumer against ActiveMQ (MSGAUDIT_STOMP_ADDR).
	STOMP = "stomp"
	// AMQP is rabbitconsumer against RabbitMQ (MSGAUDIT_AMQP_URL).
	AMQP = "amqp"
	// NATS is natsconsumer against NATS JetStream (MSGAUDIT_NATS_URL).
	NATS = "nats"
)

// Databases the ledger (and a transactional inbox) can live in.
const (
	// PostgreSQL is the database at MSGAUDIT_POSTGRES_URL.
	PostgreSQL = "postgres"
	// SQLite is a file in the test's temporary directory.
	SQLite = "sqlite"
	// MySQL is the MySQL or MariaDB database at MSGAUDIT_MYSQL_URL.
	MySQL = "mysql"
)

// Duplicate tiers a child can run behind its memory tier.
const (
	// StoreInbox is the transactional inbox: the key is recorded in the
	// ledger's own transaction.
	StoreInbox = "inbox"
	// StorePgxInbox is the same inbox natively on a pgx pool (package
	// inbox/pgxinbox); PostgreSQL only.
	StorePgxInbox = "pgxinbox"
	// StoreSQLite, StorePostgres and StoreRedis are the external
	// idempotency stores of package idempotency.
	StoreSQLite   = "sqlite-store"
	StorePostgres = "postgres-store"
	StoreRedis    = "redis-store"
	// StoreNone runs the memory tier alone.
	StoreNone = "none"
)

// envConfig is the environment variable that carries a child's Config, and
// envChild its index among the children of one run.
const (
	envConfig = "MSGAUDIT_CRASHTEST_CONFIG"
	envChild  = "MSGAUDIT_CRASHTEST_CHILD"
)

// Config is what a child consumer process needs to know. The parent fills
// it and passes it in the environment.
type Config struct {
	// Transport is STOMP, AMQP or NATS.
	Transport string
	// Addr is the broker: a STOMP host:port, an AMQP URL or a NATS URL.
	Addr string
	// Queue is consumed: "/queue/name" for STOMP, a queue name for AMQP,
	// for NATS a work-queue stream whose one subject is its name.
	Queue string
	// DeadLetter is the consumer's own dead-letter destination (STOMP),
	// queue (AMQP) or subject (NATS, captured by a stream of the same
	// name).
	DeadLetter string
	// DB is PostgreSQL, SQLite or MySQL; DSN the PostgreSQL URL, the SQLite
	// path or the MySQL driver's DSN.
	DB, DSN string
	// Ledger is the ledger table.
	Ledger string
	// Store is the duplicate tier (StoreInbox, StoreSQLite, ...); StoreAt
	// its table, file or key prefix.
	Store, StoreAt string
	// StoreURL is the Redis URL for StoreRedis.
	StoreURL string
	// ClaimTTL is the external stores' claim lease.
	ClaimTTL time.Duration
	// EffectDelay is slept after the effect is written, before the
	// handler returns; AckDelay after the durable tier settled, before the
	// delivery is acknowledged.
	EffectDelay, AckDelay time.Duration
	// Concurrency and Prefetch configure the consumer.
	Concurrency, Prefetch int
	// Dir holds the children's gauge and metrics files.
	Dir string
}

// gaugePath and metricsPath are the files child i shares with the parent.
func (c *Config) gaugePath(i int) string   { return fmt.Sprintf("%s/gauges.%d", c.Dir, i) }
func (c *Config) metricsPath(i int) string { return fmt.Sprintf("%s/metrics.%d.json", c.Dir, i) }

// environ returns the environment of child i.
func (c *Config) environ(i int) ([]string, error) {
	b, err := json.Marshal(c)
	if err != nil {
		return nil, err
	}
	return append(os.Environ(), envConfig+"="+string(b), fmt.Sprintf("%s=%d", envChild, i)), nil
}

// IsChild reports whether this process was started as a crash-test child.
func IsChild() bool { return os.Getenv(envConfig) != "" }

// childConfig reads the Config and index of this child process.
func childConfig() (Config, int, error) {
	var c Config
	if err := json.Unmarshal([]byte(os.Getenv(envConfig)), &c); err != nil {
		return c, 0, fmt.Errorf("crashtest: %s: %w", envConfig, err)
	}
	var i int
	if _, err := fmt.Sscan(os.Getenv(envChild), &i); err != nil {
		return c, 0, fmt.Errorf("crashtest: %s: %w", envChild, err)
	}
	return c, i, nil
}
