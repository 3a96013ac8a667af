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
	"github.com/acemq/msgaudit/internal/testenv"
	"github.com/acemq/msgaudit/internal/testwait"
	"github.com/acemq/msgaudit/receiver"
)

// errPoolerHandler is the failure the pooler run's handlers return now
// and then: the delivery's work rolls back and it is requeued.
var errPoolerHandler = errors.New("handler failed on purpose")

// TestPgxInboxThroughPooler: the pgx-native inbox through PgBouncer in
// transaction pooling mode (MSGAUDIT_PGBOUNCER_URL) with
// default_query_exec_mode=exec. 300 keys, each delivered twice, from 16
// goroutines, a tenth of the handler runs failing (rolled back and
// requeued): every key's effect commits exactly once.
func TestPgxInboxThroughPooler(t *testing.T) {
	t.Parallel()
	raw := testenv.Getenv(t, "MSGAUDIT_PGBOUNCER_URL", "the pooler tests need PgBouncer in transaction mode")
	ctx := testwait.Context(t, 5*time.Minute)
	cfg, err := pgxpool.ParseConfig(raw)
	if err != nil {
		t.Fatal(err)
	}
	cfg.ConnConfig.DefaultQueryExecMode = pgx.QueryExecModeExec
	cfg.MaxConns = 16
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	suffix := strconv.FormatUint(rand.Uint64(), 36)
	fx, table := "msgaudit_pooler_fx_"+suffix, "msgaudit_pooler_inbox_"+suffix
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

	const nkeys, copies, workers = 300, 2, 16
	queue := make(chan string, nkeys*copies)
	var all []string
	for i := range nkeys {
		for range copies {
			all = append(all, "k"+strconv.Itoa(i))
		}
	}
	rand.Shuffle(len(all), func(i, j int) { all[i], all[j] = all[j], all[i] })
	for _, k := range all {
		queue <- k
	}
	var (
		remaining                      atomic.Int64
		acks, dups, requeues, failures atomic.Int64
		done                           = make(chan struct{})
		wg                             sync.WaitGroup
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
				res := r.Process(ctx, &receiver.Message{Key: key, Destination: "/queue/pooler", Consumer: "c1"}, h)
				if res.Err != nil && !errors.Is(res.Err, errPoolerHandler) {
					failures.Add(1)
					t.Logf("delivery of %s: %v", key, res.Err)
				}
				switch res.Action {
				case receiver.Ack:
					acks.Add(1)
					if res.Duplicate {
						dups.Add(1)
					}
				case receiver.Requeue:
					requeues.Add(1)
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
		t.Fatalf("%d deliveries never acknowledged", n)
	}
	rows, err := pool.Query(ctx, `SELECT key, n FROM `+fx)
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
		if k := "k" + strconv.Itoa(i); got[k] != 1 {
			t.Errorf("key %s: effect committed %d times, want 1", k, got[k])
		}
	}
	if len(got) != nkeys {
		t.Errorf("%d keys have effects, want %d", len(got), nkeys)
	}
	if n := failures.Load(); n != 0 {
		t.Errorf("%d deliveries failed with an error other than the handler's", n)
	}
	t.Logf("%d acks (%d duplicates), %d requeues", acks.Load(), dups.Load(), requeues.Load())
}
