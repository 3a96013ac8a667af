package lone_test

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"
	_ "modernc.org/sqlite"

	"github.com/acemq/msgaudit/connaudit"
	"github.com/acemq/msgaudit/idempotency"
	"github.com/acemq/msgaudit/idempotency/pgstore"
	"github.com/acemq/msgaudit/idempotency/redisstore"
	"github.com/acemq/msgaudit/idempotency/sqlitestore"
	"github.com/acemq/msgaudit/inbox"
	"github.com/acemq/msgaudit/inbox/pgxinbox"
	"github.com/acemq/msgaudit/internal/admission"
	"github.com/acemq/msgaudit/internal/testkit/testenv"
	"github.com/acemq/msgaudit/receiver"
)

// queue is the destination of every delivery.
const queue = "/queue/msgaudit-bench-lone"

// concurrency is the consumers' default (stompconsumer and rabbitconsumer
// DefaultConcurrency): one handler at a time.
const concurrency = 1

// Modes: grouped is batching at its defaults, single turns it off.
const (
	grouped = "grouped"
	single  = "single"
)

var modes = []string{grouped, single}

func randHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// setupCtx bounds the setup and cleanup statements.
func setupCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// counting is a transparent idempotency.BatchStore that counts the calls
// the receiver sends the real store: single-key calls, batch calls and the
// keys in those batches. It is not an *idempotency.Memory, so the receiver
// groups it by default as it does the store it wraps.
type counting struct {
	idempotency.BatchStore
	single, batches, batchKeys atomic.Uint64
}

func (c *counting) TryClaim(ctx context.Context, k idempotency.Key) (idempotency.Outcome, idempotency.Claim, error) {
	c.single.Add(1)
	return c.BatchStore.TryClaim(ctx, k)
}

func (c *counting) Confirm(ctx context.Context, cl idempotency.Claim) error {
	c.single.Add(1)
	return c.BatchStore.Confirm(ctx, cl)
}

func (c *counting) Release(ctx context.Context, cl idempotency.Claim) error {
	c.single.Add(1)
	return c.BatchStore.Release(ctx, cl)
}

func (c *counting) TryClaimBatch(ctx context.Context, keys []idempotency.Key, res []idempotency.ClaimResult) error {
	c.batches.Add(1)
	c.batchKeys.Add(uint64(len(keys)))
	return c.BatchStore.TryClaimBatch(ctx, keys, res)
}

func (c *counting) ConfirmBatch(ctx context.Context, claims []idempotency.Claim, errs []error) error {
	c.batches.Add(1)
	c.batchKeys.Add(uint64(len(claims)))
	return c.BatchStore.ConfirmBatch(ctx, claims, errs)
}

func (c *counting) ReleaseBatch(ctx context.Context, claims []idempotency.Claim, errs []error) error {
	c.batches.Add(1)
	c.batchKeys.Add(uint64(len(claims)))
	return c.BatchStore.ReleaseBatch(ctx, claims, errs)
}

// counts is a snapshot of a counting store's counters.
type counts struct{ single, batches, batchKeys uint64 }

func (c *counting) counts() counts {
	return counts{c.single.Load(), c.batches.Load(), c.batchKeys.Load()}
}

func (a counts) sub(b counts) counts {
	return counts{a.single - b.single, a.batches - b.batches, a.batchKeys - b.batchKeys}
}

// storeTarget opens one idempotency store on its real server; the store
// and whatever it leaves on the server are cleaned up with t.
type storeTarget struct {
	name string
	open func(t testing.TB) idempotency.BatchStore
}

var storeTargets = []storeTarget{
	{"sqlite", openSQLiteStore},
	{"redis", openRedisStore},
	{"postgres", openPostgresStore},
}

// openSQLiteStore opens a store in a file of t.TempDir() with the store's
// default synchronous setting.
func openSQLiteStore(t testing.TB) idempotency.BatchStore {
	s, err := sqlitestore.Open(setupCtx(t), filepath.Join(t.TempDir(), "store.db"), sqlitestore.Options{})
	if err != nil {
		t.Fatalf("sqlitestore.Open: %v", err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// openRedisStore opens a store on MSGAUDIT_REDIS_URL under its own key
// prefix, whose keys are deleted at cleanup.
func openRedisStore(t testing.TB) idempotency.BatchStore {
	raw := testenv.Getenv(t, "MSGAUDIT_REDIS_URL", "the Redis store benchmarks need a server")
	opt, err := redis.ParseURL(raw)
	if err != nil {
		t.Fatalf("MSGAUDIT_REDIS_URL: %v", err)
	}
	client := redis.NewClient(opt)
	prefix := "msgaudit-bench-lone:" + randHex(8) + ":"
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		var keys []string
		iter := client.Scan(ctx, 0, prefix+"*", 1000).Iterator()
		for iter.Next(ctx) {
			keys = append(keys, iter.Val())
		}
		if err := iter.Err(); err != nil {
			t.Errorf("cleanup: scan %s*: %v", prefix, err)
		}
		for len(keys) > 0 {
			n := min(len(keys), 1000)
			if err := client.Unlink(ctx, keys[:n]...).Err(); err != nil {
				t.Errorf("cleanup: unlink %s*: %v", prefix, err)
				break
			}
			keys = keys[n:]
		}
		_ = client.Close()
	})
	s, err := redisstore.New(context.Background(), client, redisstore.Options{Prefix: prefix})
	if err != nil {
		t.Fatalf("redisstore.New: %v", err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// postgresPool returns a pool on MSGAUDIT_POSTGRES_URL that drops tables
// at cleanup, after everything registered later has closed.
func postgresPool(t testing.TB, tables ...string) *pgxpool.Pool {
	raw := testenv.Getenv(t, "MSGAUDIT_POSTGRES_URL", "the PostgreSQL benchmarks need a server")
	pool, err := pgxpool.New(setupCtx(t), raw)
	if err != nil {
		t.Fatalf("pgxpool: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		for _, tb := range tables {
			if _, err := pool.Exec(ctx, `DROP TABLE IF EXISTS `+pgx.Identifier{tb}.Sanitize()); err != nil {
				t.Errorf("cleanup: drop %s: %v", tb, err)
			}
		}
		pool.Close()
	})
	return pool
}

// openPostgresStore opens a store on its own table, dropped at cleanup.
func openPostgresStore(t testing.TB) idempotency.BatchStore {
	table := "msgaudit_bench_lone_" + randHex(6)
	pool := postgresPool(t, table)
	ctx := setupCtx(t)
	s, err := pgstore.New(ctx, pool, pgstore.Options{Table: table})
	if err != nil {
		t.Fatalf("pgstore.New: %v", err)
	}
	if err := s.Migrate(ctx); err != nil {
		t.Fatalf("Migrate: %v", err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// newReceiver builds a receiver the way the STOMP and RabbitMQ consumers
// build theirs (a connection audit of its own, Handlers the consumer's
// concurrency) on store or selectors, with StoreBatch storeBatch; it
// returns it with the context the consumers give Process (the
// subscription's admission gate). store is nil for none.
func newReceiver(t testing.TB, store idempotency.Store, selectors []receiver.Selector, metrics *receiver.Metrics, storeBatch int) (*receiver.Receiver, context.Context) {
	ca, err := connaudit.New(connaudit.Options{})
	if err != nil {
		t.Fatal(err)
	}
	cfg := receiver.Config{
		Audit:      receiver.ConnAudit(ca),
		Store:      store,
		Selectors:  selectors,
		StoreBatch: storeBatch,
		Handlers:   concurrency,
		Metrics:    metrics,
		MemoryOnly: store == nil && len(selectors) == 0,
	}
	r, err := receiver.New(cfg)
	if err != nil {
		t.Fatalf("receiver.New: %v", err)
	}
	quit := make(chan struct{})
	t.Cleanup(func() { close(quit) })
	return r, admission.With(context.Background(), admission.New(concurrency), quit)
}

// storeBatch is receiver.Config.StoreBatch for mode.
func storeBatch(mode string) int {
	if mode == single {
		return 1
	}
	return 0 // the default: idempotency.DefaultGroupMaxBatch
}

// inboxMaxBatch is inbox.Options.MaxBatch for mode.
func inboxMaxBatch(mode string) int {
	if mode == single {
		return 1
	}
	return 0 // the default: inboxsql.DefaultMaxBatch, with Linger inboxsql.DefaultLinger
}

// laneInbox is what both inbox front ends offer.
type laneInbox interface {
	receiver.Selector
	SizeLanes(handlers int) int
	Batches() (commits, deliveries uint64)
	MaxBatch() int
	Linger() time.Duration
	Namespace(m *receiver.Message) string
	Contains(ctx context.Context, namespace, key string) (bool, error)
}

// inboxTarget opens an inbox on its database with o (Table and Dialect
// filled in) and wraps a handler body in the front end's Handler, which
// gives it the delivery's transaction; handle reports a delivery that ran
// without one.
type inboxTarget struct {
	name string
	open func(t testing.TB, o inbox.Options) (laneInbox, func(handle func(m *receiver.Message, inTx bool)) receiver.Handler)
}

var inboxTargets = []inboxTarget{
	{"sqlite", openSQLiteInbox},
	{"postgres", openPgxInbox},
}

// openSQLiteInbox opens an inbox (database/sql) in a WAL file of
// t.TempDir() with the DSN the inbox documentation asks for and SQLite's
// default synchronous (FULL).
func openSQLiteInbox(t testing.TB, o inbox.Options) (laneInbox, func(func(*receiver.Message, bool)) receiver.Handler) {
	dsn := "file:" + filepath.Join(t.TempDir(), "inbox.db") + "?_txlock=immediate&_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)"
	db, err := sql.Open("sqlite", dsn)
	if err != nil {
		t.Fatalf("sqlite: %v", err)
	}
	t.Cleanup(func() { _ = db.Close() })
	o.Dialect = inbox.SQLite
	o.Table = "msgaudit_bench_lone_" + randHex(6)
	ib, err := inbox.New(setupCtx(t), db, o)
	if err != nil {
		t.Fatalf("inbox.New: %v", err)
	}
	return ib, func(handle func(*receiver.Message, bool)) receiver.Handler {
		return inbox.Handler(func(ctx context.Context, tx *sql.Tx, m *receiver.Message) error {
			handle(m, tx != nil)
			return nil
		})
	}
}

// openPgxInbox opens a pgxinbox on its own table, dropped at cleanup.
func openPgxInbox(t testing.TB, o inbox.Options) (laneInbox, func(func(*receiver.Message, bool)) receiver.Handler) {
	o.Table = "msgaudit_bench_lone_" + randHex(6)
	pool := postgresPool(t, o.Table)
	ib, err := pgxinbox.New(setupCtx(t), pool, o)
	if err != nil {
		t.Fatalf("pgxinbox.New: %v", err)
	}
	return ib, func(handle func(*receiver.Message, bool)) receiver.Handler {
		return pgxinbox.Handler(func(ctx context.Context, tx pgx.Tx, m *receiver.Message) error {
			handle(m, tx != nil)
			return nil
		})
	}
}

// keys hands out fresh message ids in ActiveMQ's form, so the connection
// audit sees one producer's ascending sequence.
type keys struct {
	producer string
	n        int
}

func newKeys() *keys { return &keys{producer: "ID:lone-" + randHex(4) + "-1-0:1:"} }

func (k *keys) next() string {
	k.n++
	return k.producer + strconv.Itoa(k.n)
}

// message is a fresh delivery of key, as a transport hands it to Process.
func message(key string) *receiver.Message {
	return &receiver.Message{Key: key, Destination: queue, Consumer: "lone"}
}

// tally counts the handler's runs per key.
type tally struct {
	mu   sync.Mutex
	runs map[string]int
	noTx int
}

func newTally() *tally { return &tally{runs: map[string]int{}} }

func (y *tally) handle(m *receiver.Message, inTx bool) {
	y.mu.Lock()
	y.runs[m.Key]++
	if !inTx {
		y.noTx++
	}
	y.mu.Unlock()
}

func (y *tally) get(key string) (runs, noTx int) {
	y.mu.Lock()
	defer y.mu.Unlock()
	return y.runs[key], y.noTx
}
