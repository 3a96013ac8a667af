//go:build unix

package failovertest

import (
	"context"
	"database/sql"
	"fmt"
	"github.com/acemq/msgaudit/internal/testkit/logbuf"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/acemq/msgaudit/idempotency/redisstore"
	"github.com/acemq/msgaudit/inbox"
	"github.com/acemq/msgaudit/internal/testkit/stompsub"
	"github.com/acemq/msgaudit/internal/testkit/storetestkit"
	"github.com/acemq/msgaudit/internal/testkit/testenv"
	"github.com/acemq/msgaudit/receiver"
	"github.com/acemq/msgaudit/stompconsumer"
	"github.com/go-stomp/stomp/v3"
	_ "github.com/jackc/pgx/v5/stdlib" // the "pgx" database/sql driver
)

// keyHeader carries each message's application key ("failover-<run>:<n>",
// a shape the connection audit parses as producer and sequence number).
const keyHeader = "app-key"

// The plan of every run.
const (
	messages    = 5000
	kills       = 2
	batch       = 100                    // messages per producer transaction
	batchEvery  = 100 * time.Millisecond // how often the producer checks the backlog
	maxBacklog  = 1000                   // messages sent and not yet in the ledger
	concurrency = 4                      // handler goroutines
	// handlerDelay is slept by the handler after its ledger write, inside
	// the inbox's transaction or before the store's confirm: the consumer
	// is the bottleneck (at most 4/30ms, 133 messages/s), so the queue
	// holds a backlog, the prefetch window is full and handlers are
	// mid-delivery whenever a master is killed.
	handlerDelay = 30 * time.Millisecond
)

// Deadlines.
const (
	takeoverLimit = 60 * time.Second  // the standby answering after a kill
	resumeLimit   = 60 * time.Second  // the consumer's first delivery after a kill
	progressLimit = 90 * time.Second  // the ledger reaching a kill point
	quietFor      = 3 * time.Second   // nothing delivered at the end
	idleLimit     = 20 * time.Second  // idle with keys missing: give up
	finishLimit   = 180 * time.Second // the ledger complete after the last kill
	stopLimit     = 60 * time.Second  // the consumer stopped after its context ended
	cleanupLimit  = 30 * time.Second  // one cleanup statement
)

// Durable tiers a run can use.
const (
	tierInbox = "inbox"       // transactional inbox in the ledger's PostgreSQL database
	tierRedis = "redis-store" // redisstore; the ledger write commits on its own
)

// TestFailover consumes 5,000 persistent messages through two SIGKILLs
// of the master of an ActiveMQ master/slave pair (each killed broker is
// restarted as the standby, and the next kill hits the broker that took
// over). With the transactional inbox it requires exactly once: nothing
// lost, nothing applied twice. With the Redis store it requires nothing
// lost and reports keys applied twice with their deliveries. Both require
// the queue, the broker's DLQ.<queue> and the consumer's dead-letter
// destination empty at the end.
func TestFailover(t *testing.T) {
	if testing.Short() {
		t.Skip("kills ActiveMQ brokers; skipped in -short mode")
	}
	if os.Getenv("MSGAUDIT_CRASH_EXTENDED") != "1" {
		t.Skip("kills the master of the activemq-pair brokers twice (about a minute per configuration); set MSGAUDIT_CRASH_EXTENDED=1 to run it")
	}
	p := pairFromEnv(t)
	p.lock(t)
	for _, tc := range []struct {
		name, tier  string
		assertTwice bool
	}{
		{"inbox-postgres", tierInbox, true},
		{"redis-store", tierRedis, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := run(t, p, tc.tier)
			if r.lost > 0 {
				t.Errorf("lost: %d of %d keys never applied (first: %v)", r.lost, messages, r.firstLost)
			}
			if r.unknown > 0 {
				t.Errorf("the ledger holds %d keys that were never sent", r.unknown)
			}
			if len(r.twice) > 0 {
				if tc.assertTwice {
					t.Errorf("applied twice: %d keys", len(r.twice))
				} else {
					t.Logf("applied twice: %d keys, not asserted: the store confirms outside the ledger's transaction", len(r.twice))
				}
				for _, line := range r.twice[:min(len(r.twice), 10)] {
					t.Log("  " + line)
				}
			}
			if r.queueLeft != 0 || r.brokerDLQLeft != 0 || r.deadLetterLeft != 0 {
				t.Errorf("left behind: %d on the queue, %d on its DLQ, %d on the consumer's dead-letter destination",
					r.queueLeft, r.brokerDLQLeft, r.deadLetterLeft)
			}
			if r.stats.Reconnects < kills {
				t.Errorf("the consumer reconnected %d times through %d failovers", r.stats.Reconnects, kills)
			}
			// The run's premise: the kills caught deliveries in flight.
			if r.stats.Dropped+r.metrics.Duplicates() == 0 {
				t.Errorf("the kills found nothing in flight: no delivery was dropped or came again")
			}
		})
	}
}

// failover is what one kill of the master showed.
type failover struct {
	from, to  int           // the killed master, the broker that took over
	takeover  time.Duration // kill → the other broker accepting STOMP
	resume    time.Duration // kill → the consumer's first delivery on a new connection
	firstWork time.Duration // kill → its first handler call on a new connection
	at        time.Time
	gen       uint64 // the consumer's connection generation at the kill
	running   int64  // handler calls under way at the kill
}

// result is what a run observed.
type result struct {
	failovers                                []failover
	lost, unknown                            int
	firstLost                                []string
	twice                                    []string // a line per key applied more than once
	queueLeft, brokerDLQLeft, deadLetterLeft int
	metrics                                  receiver.Snapshot
	stats                                    receiver.TransportStats
	dupReasons                               map[string]int
	dupRedelivery, dupResent                 int // duplicates with a handled message's id, with another id
	handlerCalls                             int
	producerRetried, producerUnconfirmed     int64
	producerReconnects, producerStalled      int64
	total                                    int64
	elapsed                                  time.Duration
}

// event is one delivery the consumer handled: a handler call (dup "") or a
// duplicate it absorbed (dup is the tier's reason).
type event struct {
	at          time.Time
	gen         uint64
	key, msgID  string
	redelivered bool
	dup         string
}

// tracker records every delivery the consumer handled.
type tracker struct {
	consumer *stompconsumer.Consumer // set before Run
	running  atomic.Int64            // handler calls under way
	mu       sync.Mutex
	events   []event
}

// handle wraps a handler: it records the call and counts it as running
// until it returns.
func (tr *tracker) handle(h receiver.Handler) receiver.Handler {
	return func(ctx context.Context, m *receiver.Message) error {
		tr.record(m, "")
		tr.running.Add(1)
		defer tr.running.Add(-1)
		return h(ctx, m)
	}
}

func (tr *tracker) record(m *receiver.Message, dup string) {
	e := event{at: time.Now(), gen: tr.consumer.Stats().Generation, key: m.IdempotencyKey(),
		msgID: m.Header("message-id"), redelivered: m.Redelivered, dup: dup}
	tr.mu.Lock()
	tr.events = append(tr.events, e)
	tr.mu.Unlock()
}

func (tr *tracker) snapshot() []event {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	return slices.Clone(tr.events)
}

// last returns the time of the last event and how many there were.
func (tr *tracker) last() (time.Time, int) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	if len(tr.events) == 0 {
		return time.Time{}, 0
	}
	return tr.events[len(tr.events)-1].at, len(tr.events)
}

// after returns the first event on a connection newer than gen, and the
// first handler call among those.
func after(events []event, gen uint64) (first, work *event) {
	for i := range events {
		e := &events[i]
		if e.gen <= gen {
			continue
		}
		if first == nil {
			first = e
		}
		if e.dup == "" {
			return first, e
		}
	}
	return first, nil
}

// run carries out one configuration and logs its summary.
func run(t *testing.T, p *pair, tier string) result {
	pgURL := testenv.Getenv(t, "MSGAUDIT_POSTGRES_URL", "PostgreSQL, for the ledger")
	var redisURL string
	if tier == tierRedis {
		redisURL = testenv.Getenv(t, "MSGAUDIT_REDIS_URL", "Redis, for the store")
	}
	ctx := context.Background()
	// Both brokers up: a master and a standby waiting on the lock. A run
	// that ends between a kill and the restart leaves the pair whole too.
	if err := p.up(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := p.up(context.Background()); err != nil {
			t.Errorf("cleanup: %v", err)
		}
	})
	for i := range p.addrs {
		if _, err := p.pid(i); err != nil {
			t.Fatal(err)
		}
	}

	id := storetestkit.Hex(5)
	queue := "/queue/msgaudit.failover." + id
	dead := queue + ".dead"
	brokerDLQ := "/queue/DLQ.msgaudit.failover." + id
	drained := false
	t.Cleanup(func() {
		if drained {
			return
		}
		// A run that failed before its checks empties its queues.
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		for _, q := range []string{queue, dead, brokerDLQ} {
			if err := drain(ctx, p, q); err != nil {
				t.Errorf("cleanup: %v", err)
			}
		}
	})

	// The test's own connections, and the consumer's pool: each running
	// delivery holds one for its inbox transaction.
	tdb := openDB(t, pgURL, 3)
	cdb := openDB(t, pgURL, concurrency+1)
	ledger := "failover_ledger_" + id
	if _, err := tdb.ExecContext(ctx, "CREATE TABLE "+ledger+" (key TEXT PRIMARY KEY, n INTEGER NOT NULL)"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dropTable(t, tdb, ledger) })
	apply := "INSERT INTO " + ledger + " (key, n) VALUES ($1, 1) ON CONFLICT (key) DO UPDATE SET n = " + ledger + ".n + 1"

	tr := new(tracker)
	metrics := new(receiver.Metrics)
	var logs logbuf.Buffer
	cfg := stompconsumer.Config{
		Addresses:             p.addrs,
		Concurrency:           concurrency,
		ShutdownTimeout:       10 * time.Second,
		DeadLetterDestination: dead,
		CopySecret:            []byte("failovertest copy secret, one per run"), // copies outlive a consumer
		KeyHeader:             keyHeader,
		Pipeline: receiver.Config{Logger: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelInfo})), Metrics: metrics,
			OnDuplicate: func(_ context.Context, m *receiver.Message, reason string) { tr.record(m, reason) }},
	}
	var handler receiver.Handler
	switch tier {
	case tierInbox:
		table := "failover_inbox_" + id
		ib, err := inbox.New(ctx, cdb, inbox.Options{Dialect: inbox.PostgreSQL, Table: table, Metrics: metrics})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { dropTable(t, tdb, `"`+table+`"`) })
		cfg.Pipeline.Inbox = ib
		handler = inbox.Handler(func(ctx context.Context, tx *sql.Tx, m *receiver.Message) error {
			if _, err := tx.ExecContext(ctx, apply, m.IdempotencyKey()); err != nil {
				return err
			}
			time.Sleep(handlerDelay)
			return nil
		})
	case tierRedis:
		prefix := "msgaudit:failover:" + id + ":"
		st, err := redisstore.Open(ctx, redisURL+"?msgaudit_prefix="+prefix, redisstore.Options{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			st.Close()
			storetestkit.DeleteRedisPrefix(t, redisURL, prefix)
		})
		cfg.Pipeline.Store = st
		handler = func(ctx context.Context, m *receiver.Message) error {
			if _, err := cdb.ExecContext(ctx, apply, m.IdempotencyKey()); err != nil {
				return err
			}
			time.Sleep(handlerDelay)
			return nil
		}
	default:
		t.Fatalf("unknown tier %q", tier)
	}
	cfg.Subscriptions = []stompconsumer.Subscription{{Destination: queue, Handler: tr.handle(handler)}}
	c, err := stompconsumer.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	tr.consumer = c
	t.Cleanup(func() {
		if t.Failed() {
			l := logs.String()
			t.Logf("consumer log (last 4000 bytes):\n%s", l[max(0, len(l)-4000):])
		}
	})

	start := time.Now()
	cctx, stopConsumer := context.WithCancel(ctx)
	defer stopConsumer()
	runErr := make(chan error, 1)
	runDone := make(chan struct{})
	go func() { runErr <- c.Run(cctx); close(runDone) }()
	// A run that fails midway stops its consumer before the tables are
	// dropped: an inbox transaction left open would make DROP TABLE wait.
	t.Cleanup(func() {
		stopConsumer()
		select {
		case <-runDone:
		case <-time.After(stopLimit):
			t.Errorf("cleanup: the consumer had not stopped %v after its context ended", stopLimit)
		}
	})

	keys := make([]string, messages)
	for i := range keys {
		keys[i] = fmt.Sprintf("failover-%s:%d", id, i+1)
	}
	pr := &producer{p: p}
	pctx, stopProducer := context.WithCancel(ctx)
	prodErr := make(chan error, 1)
	prodDone := make(chan struct{})
	defer func() {
		// The producer ends at its next check of pctx: at most one
		// transaction's limit away.
		stopProducer()
		select {
		case <-prodDone:
		case <-time.After(txLimit + 15*time.Second):
			t.Errorf("the producer had not stopped %v after it was told to: %s", txLimit+15*time.Second, pr.state())
		}
	}()
	go func() {
		defer close(prodDone)
		defer pr.close()
		tick := time.NewTicker(batchEvery)
		defer tick.Stop()
		for i := 0; i < len(keys); i += batch {
			// At most maxBacklog messages ahead of the ledger, so that
			// production goes on through both failovers.
			for {
				n, err := applied(pctx, tdb, ledger)
				if err != nil {
					prodErr <- err
					return
				}
				if i-n < maxBacklog {
					break
				}
				pr.setPhase("waiting for the ledger (%d keys) to come within %d of %d", n, maxBacklog, i)
				select {
				case <-tick.C:
				case <-pctx.Done():
					prodErr <- pctx.Err()
					return
				}
			}
			if err := pr.send(pctx, queue, keys[i:min(i+batch, len(keys))]); err != nil {
				prodErr <- err
				return
			}
		}
		pr.setPhase("done")
		prodErr <- nil
	}()

	// report says where everything stands, for a run that stalls.
	report := func() string {
		var b strings.Builder
		rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		n, err := applied(rctx, tdb, ledger)
		cancel()
		fmt.Fprintf(&b, "\nledger: %d keys (err %v)\n%s\n", n, err, pr.state())
		last, events := tr.last()
		fmt.Fprintf(&b, "consumer: %d deliveries recorded, the last %v ago, %d handler calls running\n  stats %+v\n  metrics %+v\n",
			events, time.Since(last).Round(time.Millisecond), tr.running.Load(), c.Stats(), metrics.Snapshot())
		b.WriteString(stacks())
		for _, pf := range p.pidfiles {
			b.WriteString(logTail(filepath.Join(filepath.Dir(filepath.Dir(pf)), "log", "activemq.log"), 30))
		}
		b.WriteString(brokerThreads(p))
		return b.String()
	}

	var res result
	for k := range kills {
		point := (k + 1) * messages / (kills + 2)
		if err := awaitApplied(ctx, tdb, ledger, point, runErr, prodErr); err != nil {
			t.Fatalf("before kill %d: %v%s", k+1, err, report())
		}
		m, err := p.master(ctx)
		if err != nil {
			t.Fatal(err)
		}
		f := failover{from: m, to: 1 - m, gen: c.Stats().Generation, running: tr.running.Load()}
		if f.at, err = p.kill(m); err != nil {
			t.Fatal(err)
		}
		took, err := p.awaitMaster(ctx, f.to, takeoverLimit)
		if err != nil {
			t.Fatal(err)
		}
		f.takeover = took.Sub(f.at)
		if err := awaitResume(tr, f.gen, runErr); err != nil {
			t.Fatalf("after kill %d: %v%s", k+1, err, report())
		}
		// The killed broker comes back as the standby.
		if err := p.up(ctx); err != nil {
			t.Fatal(err)
		}
		if _, err := p.pid(m); err != nil {
			t.Fatal(err)
		}
		if now, err := p.master(ctx); err != nil || now != f.to {
			t.Fatalf("after restarting %s the master is broker %d (%v), want %s", p.addrs[m], now, err, p.addrs[f.to])
		}
		res.failovers = append(res.failovers, f)
		first, _ := after(tr.snapshot(), f.gen)
		t.Logf("kill %d at %.1fs: %s (master) killed, %s took over after %v; consumer resumed after %v",
			k+1, f.at.Sub(start).Seconds(), p.addrs[m], p.addrs[f.to], f.takeover.Round(time.Millisecond), first.at.Sub(f.at).Round(time.Millisecond))
	}

	select {
	case err := <-prodErr:
		if err != nil {
			t.Fatalf("producer: %v", err)
		}
	case <-time.After(finishLimit):
		t.Fatalf("the producer had not finished %v after the last kill%s", finishLimit, report())
	}
	if err := awaitDone(ctx, tdb, ledger, tr, runErr); err != nil {
		t.Errorf("%v%s", err, report())
	}
	stopConsumer()
	select {
	case err := <-runErr:
		if err != nil {
			t.Errorf("consumer Run: %v", err)
		}
	case <-time.After(stopLimit):
		t.Fatalf("the consumer had not stopped %v after its context ended", stopLimit)
	}
	res.elapsed = time.Since(start)

	// What is left, browsed on the master.
	for _, q := range []struct {
		dest string
		n    *int
	}{{queue, &res.queueLeft}, {brokerDLQ, &res.brokerDLQLeft}, {dead, &res.deadLetterLeft}} {
		if *q.n, err = browse(ctx, p, q.dest); err != nil {
			t.Fatal(err)
		}
	}
	drained = res.queueLeft == 0 && res.brokerDLQLeft == 0 && res.deadLetterLeft == 0

	events := tr.snapshot()
	for i := range res.failovers {
		f := &res.failovers[i]
		first, work := after(events, f.gen)
		if first != nil {
			f.resume = first.at.Sub(f.at)
		}
		if work != nil {
			f.firstWork = work.at.Sub(f.at)
		}
	}
	res.dupReasons = map[string]int{}
	calls := map[string][]event{}
	handled := map[string]bool{} // message ids that reached the handler
	for _, e := range events {
		if e.dup == "" {
			res.handlerCalls++
			calls[e.key] = append(calls[e.key], e)
			handled[e.msgID] = true
		}
	}
	for _, e := range events {
		if e.dup != "" {
			res.dupReasons[e.dup]++
			if handled[e.msgID] {
				res.dupRedelivery++
			} else {
				res.dupResent++
			}
		}
	}
	rows := ledgerRows(t, tdb, ledger)
	sent := map[string]bool{}
	for _, k := range keys {
		sent[k] = true
		switch n := rows[k]; {
		case n == 0:
			res.lost++
			if len(res.firstLost) < 5 {
				res.firstLost = append(res.firstLost, k)
			}
		case n > 1:
			res.twice = append(res.twice, explainTwice(k, n, calls[k], res.failovers, start))
		}
	}
	for k := range rows {
		if !sent[k] {
			res.unknown++
		}
	}
	res.metrics, res.stats = metrics.Snapshot(), c.Stats()
	res.producerRetried, res.producerUnconfirmed = pr.retried.Load(), pr.unconfirmed.Load()
	res.producerReconnects, res.producerStalled, res.total = pr.reconnects.Load(), pr.stalled.Load(), pr.sent.Load()
	t.Log(res.summary(tier, p))
	return res
}

// summary is the run's report line.
func (r result) summary(tier string, p *pair) string {
	var b strings.Builder
	m, s := r.metrics, r.stats
	fmt.Fprintf(&b, "failover tier=%s messages=%d kills=%d lost=%d twice=%d unknown=%d left(queue=%d broker-dlq=%d dead-letter=%d) time=%.1fs\n",
		tier, messages, len(r.failovers), r.lost, len(r.twice), r.unknown, r.queueLeft, r.brokerDLQLeft, r.deadLetterLeft, r.elapsed.Seconds())
	for i, f := range r.failovers {
		fmt.Fprintf(&b, "  kill %d: master %s killed with %d handler calls under way; %s took over after %v; consumer resumed (first delivery on a new connection) after %v, first new work after %v\n",
			i+1, p.addrs[f.from], f.running, p.addrs[f.to], f.takeover.Round(time.Millisecond), f.resume.Round(time.Millisecond), f.firstWork.Round(time.Millisecond))
	}
	fmt.Fprintf(&b, "  producer: %d messages confirmed, %d sent again (%d of them after a COMMIT without receipt), %d reconnects, %d transactions given up after %v\n",
		r.total, r.producerRetried, r.producerUnconfirmed, r.producerReconnects, r.producerStalled, txLimit)
	fmt.Fprintf(&b, "  receiver: delivered=%d redelivered=%d processed=%d handler-calls=%d duplicates(audit=%d store=%d in-flight=%d other=%d) retries=%d dead-lettered=%d handler-errors=%d store-errors=%d\n",
		m.Delivered, m.Redelivered, m.Processed, r.handlerCalls, m.DuplicatesAudit, m.DuplicatesStore, m.DuplicatesInFlight, m.DuplicatesOther,
		m.Retries, m.DeadLettered, m.HandlerErrors, m.StoreErrors)
	reasons := make([]string, 0, len(r.dupReasons))
	for k, v := range r.dupReasons {
		reasons = append(reasons, fmt.Sprintf("%s=%d", k, v))
	}
	slices.Sort(reasons)
	fmt.Fprintf(&b, "  duplicates absorbed by reason (OnDuplicate): %s; by origin: %d redeliveries of a handled message id, %d copies under another id (the producer's resends)\n",
		strings.Join(reasons, " "), r.dupRedelivery, r.dupResent)
	fmt.Fprintf(&b, "  consumer: connects=%d reconnects=%d connect-errors=%d dropped(received on a lost connection, delivered again)=%d stale-acks=%d ack-errors=%d retries-sent=%d dead-letters-sent=%d",
		s.Connects, s.Reconnects, s.ConnectErrors, s.Dropped, s.StaleAcks, s.AckErrors, s.RetriesSent, s.DeadLetters)
	return b.String()
}

// explainTwice describes the handler calls of a key applied n times and
// names their cause: copies the producer resent under new message ids,
// or one message the broker delivered again, and the failovers between
// the calls.
func explainTwice(key string, n int, calls []event, fs []failover, start time.Time) string {
	ids := map[string]bool{}
	var parts []string
	for _, e := range calls {
		ids[e.msgID] = true
		parts = append(parts, fmt.Sprintf("%s gen=%d redelivered=%t at %.3fs", e.msgID, e.gen, e.redelivered, e.at.Sub(start).Seconds()))
	}
	cause := "one message delivered again"
	if len(ids) > 1 {
		cause = "copies resent by the producer under new message ids"
	}
	if len(calls) > 0 {
		for i, f := range fs {
			if calls[0].at.Before(f.at) && calls[len(calls)-1].at.After(f.at) {
				cause += fmt.Sprintf(", across kill %d", i+1)
			}
		}
	}
	return fmt.Sprintf("%s applied %d times (%s): %s", key, n, cause, strings.Join(parts, "; "))
}

// applied returns the number of keys in the ledger.
func applied(ctx context.Context, db *sql.DB, ledger string) (int, error) {
	var n int
	err := db.QueryRowContext(ctx, "SELECT COUNT(*) FROM "+ledger).Scan(&n)
	return n, err
}

// awaitApplied waits until the ledger holds at least n keys.
func awaitApplied(ctx context.Context, db *sql.DB, ledger string, n int, runErr, prodErr <-chan error) error {
	deadline := time.Now().Add(progressLimit)
	for {
		got, err := applied(ctx, db, ledger)
		if err != nil {
			return err
		}
		if got >= n {
			return nil
		}
		select {
		case err := <-runErr:
			return fmt.Errorf("the consumer stopped (ledger %d keys): %v", got, err)
		case err := <-prodErr:
			if err != nil {
				return fmt.Errorf("producer: %w", err)
			}
			return fmt.Errorf("the producer finished while the ledger held %d keys, before the kill point %d", got, n)
		default:
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the ledger holds %d keys after %v, waiting for %d", got, progressLimit, n)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// awaitResume waits for the consumer's first delivery on a connection
// newer than gen.
func awaitResume(tr *tracker, gen uint64, runErr <-chan error) error {
	deadline := time.Now().Add(resumeLimit)
	for {
		if first, _ := after(tr.snapshot(), gen); first != nil {
			return nil
		}
		select {
		case err := <-runErr:
			return fmt.Errorf("the consumer stopped: %v", err)
		default:
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the consumer handled nothing on a new connection within %v (stats %+v)", resumeLimit, tr.consumer.Stats())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// awaitDone waits until the ledger holds every key and the consumer has
// handled nothing for quietFor (whatever the queue still held —
// redeliveries, resent copies, retry copies — has been dealt with).
func awaitDone(ctx context.Context, db *sql.DB, ledger string, tr *tracker, runErr <-chan error) error {
	deadline := time.Now().Add(finishLimit)
	for {
		got, err := applied(ctx, db, ledger)
		if err != nil {
			return err
		}
		last, _ := tr.last()
		idle := time.Since(last)
		switch {
		case got >= messages && idle >= quietFor:
			return nil
		case got < messages && idle >= idleLimit:
			return fmt.Errorf("the ledger holds %d of %d keys and the consumer has handled nothing for %v", got, messages, idleLimit)
		case time.Now().After(deadline):
			return fmt.Errorf("the ledger holds %d of %d keys %v after the last kill", got, messages, finishLimit)
		}
		select {
		case err := <-runErr:
			return fmt.Errorf("the consumer stopped: %v", err)
		default:
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// browse counts the messages a queue browse on the master returns
// (ActiveMQ caps one browse at maxBrowsePageSize, 400 by default, so a
// non-zero count is a lower bound; zero is exact).
func browse(ctx context.Context, p *pair, dest string) (int, error) {
	m, err := p.master(ctx)
	if err != nil {
		return 0, err
	}
	c, err := p.dial(ctx, m)
	if err != nil {
		return 0, err
	}
	defer func() { _ = c.Disconnect() }()
	sub, err := c.Subscribe(dest, stomp.AckAuto, stomp.SubscribeOpt.Header("browser", "true"))
	if err != nil {
		return 0, fmt.Errorf("browse %s: %w", dest, err)
	}
	defer func() { _ = stompsub.Unsubscribe(sub) }()
	timeout := time.NewTimer(30 * time.Second)
	defer timeout.Stop()
	n := 0
	for {
		select {
		case msg, ok := <-sub.C:
			if !ok {
				return n, fmt.Errorf("browse %s: subscription closed before the browse ended", dest)
			}
			if msg.Err != nil {
				return n, fmt.Errorf("browse %s: %w", dest, msg.Err)
			}
			if msg.Header.Get("browser") == "end" {
				return n, nil
			}
			n++
		case <-timeout.C:
			return n, fmt.Errorf("browse %s: no browser:end within 30s", dest)
		}
	}
}

// drain consumes and acknowledges whatever dest holds, on the master,
// until nothing has come for half a second.
func drain(ctx context.Context, p *pair, dest string) error {
	m, err := p.master(ctx)
	if err != nil {
		return err
	}
	c, err := p.dial(ctx, m)
	if err != nil {
		return err
	}
	defer func() { _ = c.Disconnect() }()
	sub, err := c.Subscribe(dest, stomp.AckClientIndividual, stomp.SubscribeOpt.Header("activemq.prefetchSize", "200"))
	if err != nil {
		return fmt.Errorf("drain %s: %w", dest, err)
	}
	defer func() { _ = stompsub.Unsubscribe(sub) }()
	quiet := time.NewTimer(500 * time.Millisecond)
	defer quiet.Stop()
	for {
		select {
		case msg, ok := <-sub.C:
			if !ok || msg.Err != nil {
				return fmt.Errorf("drain %s: subscription ended", dest)
			}
			if err := c.Ack(msg); err != nil {
				return fmt.Errorf("drain %s: %w", dest, err)
			}
			quiet.Reset(500 * time.Millisecond)
		case <-quiet.C:
			return nil
		case <-ctx.Done():
			return fmt.Errorf("drain %s: %w", dest, ctx.Err())
		}
	}
}

// dropTable drops a table of the run, waiting at most cleanupLimit for
// its lock.
func dropTable(t testing.TB, db *sql.DB, table string) {
	ctx, cancel := context.WithTimeout(context.Background(), cleanupLimit)
	defer cancel()
	conn, err := db.Conn(ctx)
	if err != nil {
		t.Errorf("cleanup: drop %s: %v", table, err)
		return
	}
	defer conn.Close()
	if _, err := conn.ExecContext(ctx, "SET lock_timeout = '20s'"); err != nil {
		t.Errorf("cleanup: drop %s: %v", table, err)
		return
	}
	if _, err := conn.ExecContext(ctx, "DROP TABLE IF EXISTS "+table); err != nil {
		t.Errorf("cleanup: drop %s: %v", table, err)
	}
	_, _ = conn.ExecContext(ctx, "RESET lock_timeout")
}

// openDB opens PostgreSQL through pgx's database/sql driver.
func openDB(t testing.TB, url string, conns int) *sql.DB {
	t.Helper()
	db, err := sql.Open("pgx", url)
	if err != nil {
		t.Fatal(err)
	}
	db.SetMaxOpenConns(conns)
	t.Cleanup(func() {
		// Close waits for the statements in progress; a connection some
		// stuck transaction still holds is left behind rather than hanging
		// the run.
		done := make(chan struct{})
		go func() { db.Close(); close(done) }()
		select {
		case <-done:
		case <-time.After(cleanupLimit):
			t.Errorf("cleanup: closing the database pool took over %v", cleanupLimit)
		}
	})
	if err := db.PingContext(context.Background()); err != nil {
		testenv.Require(t, false, "PostgreSQL at MSGAUDIT_POSTGRES_URL does not answer: "+err.Error(), testenv.How)
	}
	return db
}

// ledgerRows returns every key of the ledger with its count.
func ledgerRows(t testing.TB, db *sql.DB, ledger string) map[string]int {
	t.Helper()
	rs, err := db.QueryContext(context.Background(), "SELECT key, n FROM "+ledger)
	if err != nil {
		t.Fatal(err)
	}
	defer rs.Close()
	got := map[string]int{}
	for rs.Next() {
		var k string
		var n int
		if err := rs.Scan(&k, &n); err != nil {
			t.Fatal(err)
		}
		got[k] = n
	}
	if err := rs.Err(); err != nil {
		t.Fatal(err)
	}
	return got
}
