package pgxinbox_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/acemq/msgaudit/inbox"
	"github.com/acemq/msgaudit/inbox/pgxinbox"
	"github.com/acemq/msgaudit/internal/testkit/testenv"
	"github.com/acemq/msgaudit/internal/testkit/testwait"
	"github.com/acemq/msgaudit/receiver"
)

// errPoolerHandler is the failure the exactly-once runs' handlers return
// now and then: the delivery's work rolls back and it is requeued.
var errPoolerHandler = errors.New("handler failed on purpose")

// onceRun is an exactly-once run: an inbox on its own table, an effects
// table the handler increments, and what the deliveries answered.
type onceRun struct {
	pool *pgxpool.Pool
	fx   string
	r    *receiver.Receiver
	h    receiver.Handler

	deliveries, acks, duplicates, requeues, failures atomic.Int64

	mu      sync.Mutex
	newAcks map[string]int // acknowledgements of committed work, by key
}

// newOnceRun opens a pool of 16 connections on rawURL (with mode as the
// default query mode unless zero), an inbox and an effects table of its
// own (dropped at cleanup) and a receiver whose handler fails a tenth of
// its runs.
func newOnceRun(t *testing.T, rawURL string, mode pgx.QueryExecMode) *onceRun {
	t.Helper()
	ctx := testwait.Context(t, time.Minute)
	cfg, err := pgxpool.ParseConfig(rawURL)
	if err != nil {
		t.Fatal(err)
	}
	if mode != 0 {
		cfg.ConnConfig.DefaultQueryExecMode = mode
	}
	cfg.MaxConns = 16
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	suffix := strconv.FormatUint(rand.Uint64(), 36)
	fx, table := "msgaudit_once_fx_"+suffix, "msgaudit_once_inbox_"+suffix
	if _, err := pool.Exec(ctx, `CREATE TABLE `+fx+` (key text PRIMARY KEY, n integer NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		for _, tb := range []string{fx, table} {
			if _, err := pool.Exec(ctx, `DROP TABLE IF EXISTS `+tb); err != nil {
				t.Errorf("cleanup: drop %s: %v", tb, err)
			}
		}
		pool.Close()
	})
	ib, err := pgxinbox.New(ctx, pool, inbox.Options{Table: table})
	if err != nil {
		t.Fatal(err)
	}
	r, err := receiver.New(receiver.Config{Selectors: []receiver.Selector{ib}, MaxAttempts: 1000})
	if err != nil {
		t.Fatal(err)
	}
	h := pgxinbox.Handler(func(ctx context.Context, tx pgx.Tx, m *receiver.Message) error {
		if _, err := tx.Exec(ctx, `INSERT INTO `+fx+` (key, n) VALUES ($1, 1) ON CONFLICT (key) DO UPDATE SET n = `+fx+`.n + 1`, m.Key); err != nil {
			return err
		}
		if rand.IntN(10) == 0 {
			return errPoolerHandler
		}
		return nil
	})
	return &onceRun{pool: pool, fx: fx, r: r, h: h, newAcks: map[string]int{}}
}

// deliver delivers keys k0…k(nkeys-1), each copies times, from workers
// goroutines through receiver.Process in random order, handing every
// requeued delivery back until each one is acknowledged; onResult, when
// not nil, sees every result. A dead letter fails the test.
func (o *onceRun) deliver(t *testing.T, ctx context.Context, nkeys, copies, workers int, onResult func(receiver.Result)) {
	t.Helper()
	var all []string
	for i := range nkeys {
		for range copies {
			all = append(all, "k"+strconv.Itoa(i))
		}
	}
	rand.Shuffle(len(all), func(i, j int) { all[i], all[j] = all[j], all[i] })
	queue := make(chan string, len(all))
	for _, k := range all {
		queue <- k
	}
	var (
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
				o.deliveries.Add(1)
				res := o.r.Process(ctx, &receiver.Message{Key: key, Destination: "/queue/once", Consumer: "c1"}, o.h)
				if onResult != nil {
					onResult(res)
				}
				if res.Err != nil && !errors.Is(res.Err, errPoolerHandler) {
					o.failures.Add(1)
				}
				switch res.Action {
				case receiver.Ack:
					o.acks.Add(1)
					if res.Duplicate {
						o.duplicates.Add(1)
					} else {
						o.mu.Lock()
						o.newAcks[key]++
						o.mu.Unlock()
					}
				case receiver.Requeue:
					o.requeues.Add(1)
					queue <- key
					continue
				default:
					t.Errorf("delivery of %s: %v (%s, %v)", key, res.Action, res.Reason, res.Err)
				}
				if remaining.Add(-1) == 0 {
					close(done)
				}
			}
		}()
	}
	testwait.Group(t, &wg, 5*time.Minute, "the end of the delivering workers")
	if n := remaining.Load(); n != 0 {
		t.Fatalf("%d deliveries never acknowledged (%v)", n, ctx.Err())
	}
}

// checkOnce fails t unless every key's effect committed exactly once and
// at most one delivery of it was acknowledged as new work (a second would
// mean an earlier acknowledgement covered no commit). It returns how many
// keys had none: their COMMIT succeeded on the server but its answer was
// lost, so the delivery was requeued and the redelivery acknowledged as a
// duplicate.
func (o *onceRun) checkOnce(t *testing.T, nkeys int) (lostAnswers int) {
	t.Helper()
	ctx := testwait.Context(t, time.Minute)
	rows, err := o.pool.Query(ctx, `SELECT key, n FROM `+o.fx)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]int{}
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
	for i := range nkeys {
		k := "k" + strconv.Itoa(i)
		if got[k] != 1 {
			t.Errorf("key %s: effect committed %d times, want 1", k, got[k])
		}
		switch n := o.newAcks[k]; {
		case n > 1:
			t.Errorf("key %s: %d deliveries acknowledged as new work, want at most 1", k, n)
		case n == 0:
			lostAnswers++
		}
	}
	if len(got) != nkeys {
		t.Errorf("%d keys have effects, want %d", len(got), nkeys)
	}
	return lostAnswers
}

// TestPgxInboxThroughPooler: the pgx-native inbox through PgBouncer in
// transaction pooling mode (MSGAUDIT_PGBOUNCER_URL) with
// default_query_exec_mode=exec. 300 keys, each delivered twice, from 16
// goroutines, a tenth of the handler runs failing (rolled back and
// requeued): every key's effect commits exactly once, and every key's
// first acknowledgement is of its committed work.
func TestPgxInboxThroughPooler(t *testing.T) {
	t.Parallel()
	raw := testenv.Getenv(t, "MSGAUDIT_PGBOUNCER_URL", "the pooler tests need PgBouncer in transaction mode")
	ctx := testwait.Context(t, 5*time.Minute)
	o := newOnceRun(t, raw, pgx.QueryExecModeExec)
	const nkeys = 300
	o.deliver(t, ctx, nkeys, 2, 16, nil)
	if lost := o.checkOnce(t, nkeys); lost != 0 {
		t.Errorf("%d keys without an acknowledgement of their work: no commit's answer can be lost here", lost)
	}
	if n := o.failures.Load(); n != 0 {
		t.Errorf("%d deliveries failed with an error other than the handler's", n)
	}
	t.Logf("%d deliveries: %d acks (%d duplicates), %d requeues", o.deliveries.Load(), o.acks.Load(), o.duplicates.Load(), o.requeues.Load())
}
