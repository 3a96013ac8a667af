package pgxinbox_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/acemq/msgaudit/inbox"
	"github.com/acemq/msgaudit/inbox/pgxinbox"
	"github.com/acemq/msgaudit/internal/testkit/testenv"
	"github.com/acemq/msgaudit/receiver"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

const testQueue = "/queue/pgxinbox-test"

func randHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// fixture is a pool, an inbox on its own table and an effects table
// (key → applied count; parent "bad" fails the COMMIT through a deferred
// foreign key), all dropped at cleanup.
type fixture struct {
	pool          *pgxpool.Pool
	ib            *pgxinbox.Inbox
	table, fx, pa string
}

func newFixture(t testing.TB, maxConns int32) *fixture {
	t.Helper()
	raw := testenv.Getenv(t, "MSGAUDIT_POSTGRES_URL", "the pgxinbox tests need a PostgreSQL server")
	cfg, err := pgxpool.ParseConfig(raw)
	if err != nil {
		t.Fatalf("MSGAUDIT_POSTGRES_URL: %v", err)
	}
	if maxConns > 0 {
		cfg.MaxConns = maxConns
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatalf("pgxpool: %v", err)
	}
	s := randHex(4)
	f := &fixture{pool: pool, table: "msgaudit_pgxinbox_" + s, fx: "msgaudit_pgxinbox_fx_" + s, pa: "msgaudit_pgxinbox_pa_" + s}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		for _, tb := range []string{f.table, f.fx, f.pa} {
			if _, err := pool.Exec(ctx, `DROP TABLE IF EXISTS `+tb); err != nil {
				t.Errorf("cleanup: drop %s: %v", tb, err)
			}
		}
		pool.Close()
	})
	for _, q := range []string{
		`CREATE TABLE ` + f.pa + ` (id text PRIMARY KEY)`,
		`INSERT INTO ` + f.pa + ` VALUES ('ok')`,
		`CREATE TABLE ` + f.fx + ` (key text PRIMARY KEY, n int NOT NULL, parent text NOT NULL REFERENCES ` + f.pa + ` DEFERRABLE INITIALLY DEFERRED)`,
	} {
		if _, err := pool.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	if f.ib, err = pgxinbox.New(ctx, pool, inbox.Options{Table: f.table}); err != nil {
		t.Fatalf("pgxinbox.New: %v", err)
	}
	return f
}

func (f *fixture) apply(ctx context.Context, tx pgx.Tx, key, parent string) error {
	_, err := tx.Exec(ctx, `INSERT INTO `+f.fx+` (key, n, parent) VALUES ($1, 1, $2)
		ON CONFLICT (key) DO UPDATE SET n = `+f.fx+`.n + 1`, key, parent)
	return err
}

func (f *fixture) applied(t testing.TB, key string) int {
	t.Helper()
	var n int
	err := f.pool.QueryRow(context.Background(), `SELECT n FROM `+f.fx+` WHERE key = $1`, key).Scan(&n)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0
	}
	if err != nil {
		t.Fatalf("reading effect of %q: %v", key, err)
	}
	return n
}

func (f *fixture) recorded(t testing.TB, key string) bool {
	t.Helper()
	ok, err := f.ib.Contains(context.Background(), testQueue, key)
	if err != nil {
		t.Fatalf("Contains: %v", err)
	}
	return ok
}

func (f *fixture) receiver(t testing.TB) *receiver.Receiver {
	t.Helper()
	r, err := receiver.New(receiver.Config{Selectors: []receiver.Selector{f.ib}, MaxAttempts: 1000})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func process(r *receiver.Receiver, key string, h receiver.Handler) receiver.Result {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return r.Process(ctx, &receiver.Message{Key: key, Destination: testQueue}, h)
}

var errHandler = errors.New("handler failed on purpose")

// TestFlow is package inbox's flow table on pgx.
func TestFlow(t *testing.T) {
	f := newFixture(t, 0)
	ok := func(ctx context.Context, tx pgx.Tx, m *receiver.Message) error { return f.apply(ctx, tx, m.Key, "ok") }
	cases := []struct {
		name     string
		before   bool // an earlier delivery of the key committed
		h        func(ctx context.Context, tx pgx.Tx, m *receiver.Message) error
		action   receiver.Action
		reason   string
		err      error
		recorded bool
		applied  int
	}{
		{name: "new", h: ok, action: receiver.Ack, recorded: true, applied: 1},
		{name: "duplicate", before: true, h: func(ctx context.Context, tx pgx.Tx, m *receiver.Message) error {
			t.Errorf("handler ran for a recorded key")
			return nil
		}, action: receiver.Ack, reason: "inbox", recorded: true, applied: 1},
		{name: "handler error", h: func(ctx context.Context, tx pgx.Tx, m *receiver.Message) error {
			if err := f.apply(ctx, tx, m.Key, "ok"); err != nil {
				return err
			}
			return errHandler
		}, action: receiver.Requeue, reason: "handler-error", err: errHandler},
		{name: "handler panic", h: func(ctx context.Context, tx pgx.Tx, m *receiver.Message) error {
			if err := f.apply(ctx, tx, m.Key, "ok"); err != nil {
				return err
			}
			panic("on purpose")
		}, action: receiver.Requeue, reason: "panic", err: receiver.ErrPanic},
		{name: "commit fails", h: func(ctx context.Context, tx pgx.Tx, m *receiver.Message) error {
			return f.apply(ctx, tx, m.Key, "bad")
		}, action: receiver.Requeue, reason: "confirm-error", err: inbox.ErrCommit},
		{name: "handler swallows a statement error (aborted transaction)", h: func(ctx context.Context, tx pgx.Tx, m *receiver.Message) error {
			_ = f.apply(ctx, tx, m.Key, "ok")
			_, _ = tx.Exec(ctx, `SELECT 1/0`)
			return nil
		}, action: receiver.Requeue, reason: "confirm-error", err: inbox.ErrCommit},
		{name: "handler commits itself", h: func(ctx context.Context, tx pgx.Tx, m *receiver.Message) error {
			if err := f.apply(ctx, tx, m.Key, "ok"); err != nil {
				return err
			}
			return tx.Commit(ctx)
		}, action: receiver.Requeue, reason: "confirm-error", err: inbox.ErrTxEnded, recorded: true, applied: 1},
		{name: "handler rolls back itself", h: func(ctx context.Context, tx pgx.Tx, m *receiver.Message) error {
			if err := f.apply(ctx, tx, m.Key, "ok"); err != nil {
				return err
			}
			return tx.Rollback(ctx)
		}, action: receiver.Requeue, reason: "confirm-error", err: inbox.ErrTxEnded},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			key := "k-" + randHex(6)
			if c.before {
				if res := process(f.receiver(t), key, pgxinbox.Handler(ok)); res.Action != receiver.Ack {
					t.Fatalf("first delivery: %+v", res)
				}
			}
			res := process(f.receiver(t), key, pgxinbox.Handler(c.h))
			if res.Action != c.action || (c.reason != "" && res.Reason != c.reason) || (c.err != nil && !errors.Is(res.Err, c.err)) {
				t.Errorf("result %v %q %v; want %v %q %v", res.Action, res.Reason, res.Err, c.action, c.reason, c.err)
			}
			if got := f.recorded(t, key); got != c.recorded {
				t.Errorf("recorded = %v; want %v", got, c.recorded)
			}
			if got := f.applied(t, key); got != c.applied {
				t.Errorf("applied %d; want %d", got, c.applied)
			}
			if n := f.pool.Stat().AcquiredConns(); n != 0 {
				t.Errorf("%d connections still acquired: a transaction was left open", n)
			}
			if res := process(f.receiver(t), key, pgxinbox.Handler(ok)); res.Action != receiver.Ack || f.applied(t, key) != 1 {
				t.Errorf("redelivery: %v (%v), applied %d; want an ack and 1", res.Action, res.Err, f.applied(t, key))
			}
		})
	}
	if err := pgxinbox.Handler(ok)(context.Background(), &receiver.Message{Key: "x"}); !errors.Is(err, inbox.ErrNoTx) {
		t.Errorf("handler without a transaction: %v; want ErrNoTx", err)
	}
}

// TestConcurrent: goroutines with their own pools and receivers (separate
// processes, as far as the database can tell) deliver the same keys at
// once; every key's effect commits exactly once.
func TestConcurrent(t *testing.T) {
	f := newFixture(t, 0)
	const workers, keys = 4, 40
	raw := testenv.Getenv(t, "MSGAUDIT_POSTGRES_URL", "")
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for range workers {
		pool, err := pgxpool.New(context.Background(), raw)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(pool.Close)
		ib, err := pgxinbox.New(context.Background(), pool, inbox.Options{Table: f.table})
		if err != nil {
			t.Fatal(err)
		}
		r, err := receiver.New(receiver.Config{Selectors: []receiver.Selector{ib}, MaxAttempts: 1000})
		if err != nil {
			t.Fatal(err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			h := pgxinbox.Handler(func(ctx context.Context, tx pgx.Tx, m *receiver.Message) error {
				return f.apply(ctx, tx, m.Key, "ok")
			})
			for i := range keys {
				key := "c-" + strconv.Itoa(i)
				for try := 0; ; try++ {
					res := process(r, key, h)
					if res.Action == receiver.Ack {
						break
					}
					if try == 100 {
						errs <- errors.New("key " + key + ": not acknowledged after 100 tries: " + res.Reason)
						return
					}
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	for i := range keys {
		key := "c-" + strconv.Itoa(i)
		if n := f.applied(t, key); n != 1 {
			t.Errorf("key %s applied %d times; want 1", key, n)
		}
	}
}

// TestNewRejects: pgxinbox refuses what package inbox refuses, and SQLite.
func TestNewRejects(t *testing.T) {
	f := newFixture(t, 0)
	for _, o := range []inbox.Options{
		{Dialect: inbox.SQLite},
		{Table: "bad name"},
		{Retention: -time.Second},
		{Isolation: 99},
		{MaxBatch: 64}, // over the 64 subtransactions a backend caches, with the lane's savepoint
	} {
		if _, err := pgxinbox.New(context.Background(), f.pool, o); !errors.Is(err, inbox.ErrConfig) {
			t.Errorf("New(%+v) = %v; want ErrConfig", o, err)
		}
	}
	if _, err := pgxinbox.New(context.Background(), nil, inbox.Options{}); !errors.Is(err, inbox.ErrConfig) {
		t.Errorf("New(nil pool) = %v; want ErrConfig", err)
	}
	if _, err := pgxinbox.New(context.Background(), f.pool, inbox.Options{Table: f.table, MaxBatch: 63}); err != nil {
		t.Errorf("New(MaxBatch 63) = %v; want the largest batch accepted", err)
	}
}
