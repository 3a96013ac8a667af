package inbox_test

import (
	"context"
	"database/sql"
	"errors"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/acemq/msgaudit/inbox"
	"github.com/acemq/msgaudit/internal/testkit/testenv"
	"github.com/acemq/msgaudit/internal/testkit/testwait"
	"github.com/acemq/msgaudit/receiver"
)

// errPoolerHandler is the failure the exactly-once runs' handlers return
// now and then: the delivery's work rolls back and it is requeued.
var errPoolerHandler = errors.New("handler failed on purpose")

// poolerDB opens database/sql on rawURL through pgx (with mode as the
// default query mode unless it is zero), at most maxOpen connections, and
// creates an effects table; it returns the db, the effects table and a
// fresh inbox table name. The tables are dropped at cleanup.
func poolerDB(t *testing.T, rawURL string, mode pgx.QueryExecMode, maxOpen int) (db *sql.DB, fx, table string) {
	t.Helper()
	cfg, err := pgx.ParseConfig(rawURL)
	if err != nil {
		t.Fatal(err)
	}
	if mode != 0 {
		cfg.DefaultQueryExecMode = mode
	}
	db = stdlib.OpenDB(*cfg)
	db.SetMaxOpenConns(maxOpen)
	suffix := randHex(4)
	fx, table = "msgaudit_pooler_fx_"+suffix, "msgaudit_pooler_inbox_"+suffix
	ctx := testwait.Context(t, time.Minute)
	if _, err := db.ExecContext(ctx, `CREATE TABLE `+fx+` (key text PRIMARY KEY, n integer NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		for _, tb := range []string{fx, table} {
			if _, err := db.ExecContext(ctx, `DROP TABLE IF EXISTS `+tb); err != nil {
				t.Errorf("cleanup: drop %s: %v", tb, err)
			}
		}
		_ = db.Close()
	})
	return db, fx, table
}

// poolerRun is one exactly-once run's outcome.
type poolerRun struct {
	deliveries, acks, duplicates, requeues, errors atomic.Int64

	mu      sync.Mutex
	newAcks map[string]int // acknowledgements of a handler's committed work, by key
}

// poolerDeliver delivers every key copies times from workers goroutines
// through process, in random order, handing every requeued delivery back
// until each one is acknowledged or ctx ends; onResult, when not nil, sees
// every result. A dead letter fails the test.
func poolerDeliver(t *testing.T, ctx context.Context, keys []string, copies, workers int, process func(ctx context.Context, m *receiver.Message) receiver.Result, onResult func(receiver.Result)) *poolerRun {
	t.Helper()
	var all []string
	for range copies {
		all = append(all, keys...)
	}
	rand.Shuffle(len(all), func(i, j int) { all[i], all[j] = all[j], all[i] })
	queue := make(chan string, len(all))
	for _, k := range all {
		queue <- k
	}
	var (
		run       = poolerRun{newAcks: map[string]int{}}
		remaining atomic.Int64
		done      = make(chan struct{})
		wg        sync.WaitGroup
	)
	remaining.Store(int64(len(all)))
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				var key string
				select {
				case key = <-queue:
				case <-done:
					return
				case <-ctx.Done():
					return
				}
				run.deliveries.Add(1)
				res := process(ctx, &receiver.Message{Key: key, Destination: "/queue/pooler", Consumer: "c1"})
				if onResult != nil {
					onResult(res)
				}
				if res.Err != nil && !errors.Is(res.Err, errPoolerHandler) {
					run.errors.Add(1)
				}
				switch res.Action {
				case receiver.Ack:
					run.acks.Add(1)
					if res.Duplicate {
						run.duplicates.Add(1)
					} else {
						run.mu.Lock()
						run.newAcks[key]++
						run.mu.Unlock()
					}
					if remaining.Add(-1) == 0 {
						close(done)
					}
				case receiver.Requeue:
					run.requeues.Add(1)
					queue <- key
				default:
					t.Errorf("delivery of %s: %v (%s, %v)", key, res.Action, res.Reason, res.Err)
					if remaining.Add(-1) == 0 {
						close(done)
					}
				}
			}
		}()
	}
	testwait.Group(t, &wg, 5*time.Minute, "the end of the delivering workers")
	if n := remaining.Load(); n != 0 {
		t.Fatalf("%d deliveries never acknowledged (%v)", n, ctx.Err())
	}
	return &run
}

// poolerCheckOnce fails t unless every key's effect committed exactly once
// and at most one delivery of it was acknowledged as new work (a second
// would mean an earlier acknowledgement covered no commit). None is
// possible: a COMMIT that succeeded on the server but whose answer was
// lost is reported as an error, the delivery requeued, and its redelivery
// acknowledged as a duplicate.
func poolerCheckOnce(t *testing.T, db *sql.DB, fx string, keys []string, run *poolerRun) {
	t.Helper()
	poolerCheckOnceCol(t, db, fx, "key", keys, run)
}

// poolerCheckOnceCol is poolerCheckOnce with the effects table's key
// column written as col (MySQL quotes the reserved word key).
func poolerCheckOnceCol(t *testing.T, db *sql.DB, fx, col string, keys []string, run *poolerRun) {
	t.Helper()
	ctx := testwait.Context(t, time.Minute)
	got := map[string]int{}
	rows, err := db.QueryContext(ctx, `SELECT `+col+`, n FROM `+fx)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	for rows.Next() {
		var (
			k string
			n int
		)
		if err := rows.Scan(&k, &n); err != nil {
			t.Fatal(err)
		}
		got[k] = n
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	for _, k := range keys {
		if got[k] != 1 {
			t.Errorf("key %s: effect committed %d times, want 1", k, got[k])
		}
		if n := run.newAcks[k]; n > 1 {
			t.Errorf("key %s: %d deliveries acknowledged as new work, want at most 1", k, n)
		}
		delete(got, k)
	}
	for k, n := range got {
		t.Errorf("effect of a key never delivered: %s (%d)", k, n)
	}
}

// poolerKeys returns n keys with the given prefix.
func poolerKeys(prefix string, n int) []string {
	keys := make([]string, n)
	for i := range keys {
		keys[i] = prefix + strconv.Itoa(i)
	}
	return keys
}

// TestInboxThroughPooler: the inbox on database/sql through PgBouncer in
// transaction pooling mode (MSGAUDIT_PGBOUNCER_URL) with
// default_query_exec_mode=exec in the URL. 300 keys, each delivered twice, from 16
// goroutines, a tenth of the handler runs failing (rolled back and
// requeued): every key's effect commits exactly once. A transaction keeps
// one server connection from BEGIN to COMMIT in transaction mode, so the
// key's row and the handler's work commit together, as on a direct
// connection.
func TestInboxThroughPooler(t *testing.T) {
	t.Parallel()
	raw := testenv.Getenv(t, "MSGAUDIT_PGBOUNCER_URL", "the pooler tests need PgBouncer in transaction mode")
	// The URL parameter, as docs/stores.md has it; pgx's ParseConfig reads it.
	sep := "?"
	if strings.Contains(raw, "?") {
		sep = "&"
	}
	db, fx, table := poolerDB(t, raw+sep+"default_query_exec_mode=exec", 0, 16)
	ctx := testwait.Context(t, 5*time.Minute)
	ib, err := inbox.New(ctx, db, inbox.Options{Dialect: inbox.PostgreSQL, Table: table})
	if err != nil {
		t.Fatal(err)
	}
	r, err := receiver.New(receiver.Config{Selectors: []receiver.Selector{ib}, MaxAttempts: 1000})
	if err != nil {
		t.Fatal(err)
	}
	h := inbox.Handler(func(ctx context.Context, tx *sql.Tx, m *receiver.Message) error {
		if _, err := tx.ExecContext(ctx, `INSERT INTO `+fx+` (key, n) VALUES ($1, 1) ON CONFLICT (key) DO UPDATE SET n = `+fx+`.n + 1`, m.Key); err != nil {
			return err
		}
		if rand.IntN(10) == 0 {
			return errPoolerHandler
		}
		return nil
	})
	keys := poolerKeys("k", 300)
	run := poolerDeliver(t, ctx, keys, 2, 16, func(ctx context.Context, m *receiver.Message) receiver.Result {
		return r.Process(ctx, m, h)
	}, nil)
	poolerCheckOnce(t, db, fx, keys, run)
	if n := run.errors.Load(); n != 0 {
		t.Errorf("%d deliveries failed with an error other than the handler's", n)
	}
	t.Logf("%d deliveries: %d acks (%d duplicates), %d requeues", run.deliveries.Load(), run.acks.Load(), run.duplicates.Load(), run.requeues.Load())
	if n := run.acks.Load() - run.duplicates.Load(); n != int64(len(keys)) {
		t.Errorf("%d deliveries acknowledged as new work, want one per key (%d): no commit's answer can be lost here", n, len(keys))
	}
}
