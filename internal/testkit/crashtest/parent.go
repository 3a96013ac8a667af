//go:build unix

package crashtest

import (
	"bytes"
	"context"
	"database/sql"
	"fmt"
	mrand "math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/acemq/msgaudit/internal/testkit/storetestkit"
	"github.com/acemq/msgaudit/internal/testkit/testenv"
)

// Plan is one crash-test run.
type Plan struct {
	// Transport is STOMP or AMQP; DB the ledger's database (PostgreSQL,
	// SQLite or MySQL); Store the duplicate tier (StoreInbox, StoreSQLite, ...).
	Transport, DB, Store string
	// Messages is the number of messages produced.
	Messages int
	// Kills is how often child 0 is killed with SIGKILL.
	Kills int
	// Consumers is the number of consumer processes on the queue (1 or
	// 2); only child 0 is killed.
	Consumers int
	// Jitter bounds the random delay between a kill's progress point
	// being reached and the kill; 0 means 30 ms (a few deliveries' time,
	// so that the kill's moment within a delivery is random too).
	Jitter time.Duration
	// EffectDelay and AckDelay widen the kill windows (see Config).
	EffectDelay, AckDelay time.Duration
	// ClaimTTL is the external stores' lease; 0 means 2 s, short so a
	// killed child's claims lapse within the test.
	ClaimTTL time.Duration
	// Seed seeds the kill moments; 0 picks one (logged).
	Seed uint64
}

// Result is what a run observed.
type Result struct {
	Plan Plan
	// Kills counts the SIGKILLs sent; KillsEffect those that landed with at
	// least one delivery in the effect window (written, not committed or
	// confirmed), KillsSettled with one in the settle-ack window, and
	// KillsElsewhere with neither. A kill can count in both windows.
	Kills, KillsEffect, KillsSettled, KillsElsewhere int
	// InEffect and InSettled sum the deliveries found in each window at
	// the kills: with an external store InEffect bounds the keys a kill
	// can have applied twice; InSettled the duplicates the durable tier
	// absorbs after the restarts.
	InEffect, InSettled int64
	// AppliedUnderKills is the number of keys in the ledger when the last
	// killed child was restarted: the work done while kills were landing.
	AppliedUnderKills int
	// Outcome is what the ledger and the queues showed at the end.
	Outcome
	// Elapsed is the time from producing to the last check.
	Elapsed time.Duration
}

// Outcome is what the ledger, the queues and the children's metrics showed
// at the end of a run (a crash run or a fleet run).
type Outcome struct {
	// Lost is the number of keys never applied, Twice the keys applied more
	// than once, Unknown ledger keys nobody sent.
	Lost, Twice, Unknown int
	// FirstLost and FirstTwice name a few of them.
	FirstLost, FirstTwice []string
	// QueueLeft, DeadLetterLeft and BrokerDLQLeft are the messages left on
	// the queue, on the consumer's dead-letter destination and (ActiveMQ)
	// on the broker's per-queue DLQ after the last consumer stopped;
	// BrokerDLQLeft is -1 when the transport has none.
	QueueLeft, DeadLetterLeft, BrokerDLQLeft int
	// Totals sums the final metrics snapshots of every child process
	// (each written at most 100 ms before the process was killed).
	Totals Totals
	// ProcessedBy is the number of messages each child slot processed as
	// new work, over all its processes.
	ProcessedBy []uint64
	// CalledBy is the number of handler calls each child slot made, over
	// all its processes: exact, read from the shared gauges (a killed
	// process's metrics snapshot can be up to 100 ms old, and a slot
	// killed soon after each start may have finished no delivery in it).
	CalledBy []int64
}

// newOutcome is an Outcome for children child slots, before the checks.
func newOutcome(children int) Outcome {
	return Outcome{BrokerDLQLeft: -1, ProcessedBy: make([]uint64, children), CalledBy: make([]int64, children)}
}

// finish stops every child and adds up its final metrics, takes what is
// left on the run's queues (the consumer's dead-letter destination and, on
// ActiveMQ, the broker's DLQ too) and compares the ledger with the keys
// sent.
func (o *Outcome) finish(ctx context.Context, t testing.TB, children []*child, br broker, cfg Config, led *ledger, keys []string) {
	t.Helper()
	for _, c := range children {
		if err := c.stop(); err != nil {
			t.Fatal(err)
		}
		snap, err := readSnapshot(c.metricsPath)
		if err != nil {
			t.Fatal(err)
		}
		o.Totals.add(snap)
		o.ProcessedBy[c.idx] += snap.Metrics.Processed
		o.CalledBy[c.idx] += snap.Calls
	}

	tctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	var err error
	if o.QueueLeft, err = br.take(tctx, cfg.Queue); err != nil {
		t.Fatal(err)
	}
	if o.DeadLetterLeft, err = br.take(tctx, cfg.DeadLetter); err != nil {
		t.Fatal(err)
	}
	if cfg.Transport == STOMP {
		if o.BrokerDLQLeft, err = br.take(tctx, brokerDLQ(cfg.Queue)); err != nil {
			t.Fatal(err)
		}
	}

	rows, err := led.rows(ctx)
	if err != nil {
		t.Fatal(err)
	}
	sent := make(map[string]bool, len(keys))
	for _, k := range keys {
		sent[k] = true
		switch n := rows[k]; {
		case n == 0:
			o.Lost++
			if len(o.FirstLost) < 5 {
				o.FirstLost = append(o.FirstLost, k)
			}
		case n > 1:
			o.Twice++
			if len(o.FirstTwice) < 5 {
				o.FirstTwice = append(o.FirstTwice, fmt.Sprintf("%s×%d", k, n))
			}
		}
	}
	for k := range rows {
		if !sent[k] {
			o.Unknown++
		}
	}
}

// Totals are receiver counters summed over child processes.
type Totals struct {
	Delivered, Redelivered, Processed                                     uint64
	DuplicatesAudit, DuplicatesStore, DuplicatesInFlight, DuplicatesOther uint64
	Retries, DeadLettered, HandlerErrors                                  uint64
	Calls                                                                 int64
}

func (t *Totals) add(s childSnapshot) {
	m := s.Metrics
	t.Delivered += m.Delivered
	t.Redelivered += m.Redelivered
	t.Processed += m.Processed
	t.DuplicatesAudit += m.DuplicatesAudit
	t.DuplicatesStore += m.DuplicatesStore
	t.DuplicatesInFlight += m.DuplicatesInFlight
	t.DuplicatesOther += m.DuplicatesOther
	t.Retries += m.Retries
	t.DeadLettered += m.DeadLettered
	t.HandlerErrors += m.HandlerErrors
	t.Calls += s.Calls
}

// String is the summary line of a run.
func (r Result) String() string {
	p := r.Plan
	dlq := "n/a"
	if r.BrokerDLQLeft >= 0 {
		dlq = fmt.Sprint(r.BrokerDLQLeft)
	}
	return fmt.Sprintf("crash %s store=%s db=%s consumers=%d messages=%d kills=%d (effect-window %d with %d deliveries, settle-ack-window %d with %d, elsewhere %d) applied-under-kills=%d "+
		"lost=%d twice=%d redelivered=%d duplicates(audit=%d store=%d in-flight=%d other=%d) handler-calls=%d processed=%d retries=%d "+
		"dead-lettered=%d handler-errors=%d processed-by-child=%v left(queue=%d dlq=%d broker-dlq=%s) time=%.1fs",
		p.Transport, p.Store, p.DB, p.Consumers, p.Messages, r.Kills, r.KillsEffect, r.InEffect, r.KillsSettled, r.InSettled, r.KillsElsewhere, r.AppliedUnderKills,
		r.Lost, r.Twice, r.Totals.Redelivered, r.Totals.DuplicatesAudit, r.Totals.DuplicatesStore, r.Totals.DuplicatesInFlight,
		r.Totals.DuplicatesOther, r.Totals.Calls, r.Totals.Processed, r.Totals.Retries, r.Totals.DeadLettered,
		r.Totals.HandlerErrors, r.ProcessedBy, r.QueueLeft, r.DeadLetterLeft, dlq, r.Elapsed.Seconds())
}

// Deadlines of the parent's waits.
const (
	exitDeadline     = 15 * time.Second  // a killed child's exit
	stopDeadline     = 30 * time.Second  // a child's exit after SIGTERM
	completeDeadline = 120 * time.Second // the ledger complete and the consumers quiet
	quietFor         = 2 * time.Second   // how long nothing must be delivered at the end
	idleLimit        = 8 * time.Second   // how long idle consumers with keys missing are waited for
)

// Run carries out p: it produces p.Messages messages, starts the
// children, kills child 0 p.Kills times at random moments spread over the
// work (restarting it each time), waits until the ledger holds every key and the consumers
// are quiet, stops them with SIGTERM and counts what was lost, applied
// twice and left behind. It logs the summary line and returns the result;
// the caller asserts. Missing services skip the test (fail under CI=true).
func Run(t testing.TB, p Plan) Result {
	t.Helper()
	if p.Consumers <= 0 {
		p.Consumers = 1
	}
	if p.Jitter <= 0 {
		p.Jitter = 30 * time.Millisecond
	}
	if p.ClaimTTL <= 0 {
		p.ClaimTTL = 2 * time.Second
	}
	if p.Seed == 0 {
		p.Seed = mrand.Uint64()
	}
	rng := mrand.New(mrand.NewPCG(p.Seed, 0))
	id := storetestkit.Hex(5)
	dir := t.TempDir()
	ctx := context.Background()

	cfg := Config{Transport: p.Transport, DB: p.DB, Store: p.Store, ClaimTTL: p.ClaimTTL,
		EffectDelay: p.EffectDelay, AckDelay: p.AckDelay, Concurrency: 4, Prefetch: 50, Dir: dir,
		Ledger: "crash_ledger_" + id}
	var br broker
	drained := false // the final checks emptied the queues
	switch p.Transport {
	case STOMP:
		cfg.Addr = testenv.Getenv(t, "MSGAUDIT_STOMP_ADDR", "ActiveMQ's STOMP port")
		cfg.Queue = "/queue/msgaudit.crash." + id
		cfg.DeadLetter = cfg.Queue + ".DLQ"
		b, err := dialSTOMP(cfg.Addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(b.close)
		// ActiveMQ has no queue deletion over STOMP: a run that failed
		// before its final drain empties its queues here.
		t.Cleanup(func() {
			if !drained {
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				defer cancel()
				for _, q := range []string{cfg.Queue, cfg.DeadLetter, brokerDLQ(cfg.Queue)} {
					if _, err := b.take(ctx, q); err != nil {
						t.Errorf("cleanup: %v", err)
					}
				}
			}
		})
		br = b
	case AMQP:
		cfg.Addr = testenv.Getenv(t, "MSGAUDIT_AMQP_URL", "RabbitMQ")
		cfg.Queue = "msgaudit.crash." + id
		cfg.DeadLetter = cfg.Queue + ".dlq"
		b, err := dialAMQP(cfg.Addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(b.close)
		if err := b.declare(cfg.Queue, cfg.DeadLetter); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			if err := b.remove(cfg.Queue, cfg.DeadLetter); err != nil {
				t.Errorf("cleanup: %v", err)
			}
		})
		br = b
	case NATS:
		cfg.Addr = testenv.Getenv(t, "MSGAUDIT_NATS_URL", "NATS with JetStream")
		cfg.Queue = "msgaudit_crash_" + id
		cfg.DeadLetter = cfg.Queue + "_dlq"
		b, err := dialNATS(cfg.Addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(b.close)
		dctx, cancel := context.WithTimeout(ctx, time.Minute)
		err = b.declare(dctx, cfg.Queue, cfg.DeadLetter)
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			if err := b.remove(ctx, cfg.Queue, cfg.DeadLetter); err != nil {
				t.Errorf("cleanup: %v", err)
			}
		})
		br = b
	default:
		t.Fatalf("crashtest: unknown transport %q", p.Transport)
	}

	switch p.DB {
	case PostgreSQL:
		cfg.DSN = testenv.Getenv(t, "MSGAUDIT_POSTGRES_URL", "PostgreSQL")
	case SQLite:
		cfg.DSN = filepath.Join(dir, "ledger.db")
	case MySQL:
		dsn, err := mysqlDSN(testenv.Getenv(t, "MSGAUDIT_MYSQL_URL", "MySQL or MariaDB"))
		if err != nil {
			t.Fatal(err)
		}
		cfg.DSN = dsn
	default:
		t.Fatalf("crashtest: unknown database %q", p.DB)
	}
	db, err := openDB(cfg.DB, cfg.DSN, 2)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	led := newLedger(db, cfg.DB, cfg.Ledger)
	if err := led.makeTable(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := led.drop(context.Background()); err != nil {
			t.Errorf("cleanup: drop %s: %v", cfg.Ledger, err)
		}
	})
	prepareStore(t, &cfg, db, id)

	keys := make([]string, p.Messages)
	for i := range keys {
		keys[i] = fmt.Sprintf("crash-%s:%d", id, i+1)
	}
	start := time.Now()
	pctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	err = br.produce(pctx, cfg.Queue, keys)
	cancel()
	if err != nil {
		t.Fatal(err)
	}

	res := Result{Plan: p, Outcome: newOutcome(p.Consumers)}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	children := make([]*child, p.Consumers)
	for i := range children {
		c, err := newChild(exe, &cfg, i)
		if err != nil {
			t.Fatal(err)
		}
		children[i] = c
		t.Cleanup(c.cleanup)
	}
	// On failure, show the end of the children's logs.
	t.Cleanup(func() {
		if t.Failed() {
			for _, c := range children {
				t.Logf("child %d log (last lines):\n%s", c.idx, c.tail(30))
			}
		}
	})
	for _, c := range children {
		if err := c.start(); err != nil {
			t.Fatal(err)
		}
	}

	// The kills land at random points of the work (keys in the ledger,
	// below 95% of them), each after a random jitter, so that they are
	// spread over the whole run and never wait for work that is done.
	points := make([]int, p.Kills)
	for i := range points {
		points[i] = rng.IntN(p.Messages * 95 / 100)
	}
	slices.Sort(points)
	k := children[0]
	for _, point := range points {
		if err := awaitKillPoint(ctx, led, point, p.Messages, k); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Duration(rng.Int64N(int64(p.Jitter))))
		effect, settled, calls, err := k.kill()
		if err != nil {
			t.Fatal(err)
		}
		res.Kills++
		res.InEffect += effect
		res.InSettled += settled
		switch {
		case effect > 0 && settled > 0:
			res.KillsEffect++
			res.KillsSettled++
		case effect > 0:
			res.KillsEffect++
		case settled > 0:
			res.KillsSettled++
		default:
			res.KillsElsewhere++
		}
		snap, err := readSnapshot(k.metricsPath)
		if err != nil {
			t.Fatal(err)
		}
		snap.Calls = calls // exact, read while the child was frozen
		res.Totals.add(snap)
		res.ProcessedBy[k.idx] += snap.Metrics.Processed
		res.CalledBy[k.idx] += calls
		if err := k.start(); err != nil {
			t.Fatal(err)
		}
	}

	if res.AppliedUnderKills, _, err = led.counts(ctx); err != nil {
		t.Fatal(err)
	}

	// Every key applied, or the consumers idle with keys missing (then
	// the checks below say which are lost or left on a queue).
	if err := awaitLedger(ctx, led, p.Messages, children); err != nil {
		t.Error(err)
	}
	res.finish(ctx, t, children, br, cfg, led, keys)
	drained = true
	res.Elapsed = time.Since(start)
	t.Logf("%s seed=%d", res, p.Seed)
	return res
}

// prepareStore fills in where cfg.Store keeps its keys and arranges for
// them to be removed at the end.
func prepareStore(t testing.TB, cfg *Config, db *sql.DB, id string) {
	t.Helper()
	switch cfg.Store {
	case StoreNone:
	case StoreInbox, StorePgxInbox:
		if cfg.Store == StorePgxInbox && cfg.DB != PostgreSQL {
			t.Fatalf("crashtest: pgxinbox needs the PostgreSQL ledger")
		}
		cfg.StoreAt = "crash_inbox_" + id
		prepareInbox(t, cfg, db)
	case StoreSQLite:
		cfg.StoreAt = filepath.Join(cfg.Dir, "store.db")
	case StorePostgres:
		if cfg.DB != PostgreSQL {
			t.Fatalf("crashtest: the PostgreSQL store needs the PostgreSQL ledger")
		}
		cfg.StoreAt = "crash_store_" + id
		t.Cleanup(func() {
			if _, err := db.ExecContext(context.Background(), "DROP TABLE IF EXISTS "+cfg.StoreAt+" CASCADE"); err != nil {
				t.Errorf("cleanup: drop %s: %v", cfg.StoreAt, err)
			}
		})
	case StoreRedis:
		cfg.StoreURL = testenv.Getenv(t, "MSGAUDIT_REDIS_URL", "Redis")
		cfg.StoreAt = "msgaudit:crash:" + id + ":"
		t.Cleanup(func() { storetestkit.DeleteRedisPrefix(t, cfg.StoreURL, cfg.StoreAt) })
	default:
		t.Fatalf("crashtest: unknown store %q", cfg.Store)
	}
}

// awaitKillPoint waits until the ledger holds at least point of the n
// keys and the child has called its handler (a child that cannot get work
// because another consumer applied everything is killed anyway). It fails
// when the child exits or after completeDeadline.
func awaitKillPoint(ctx context.Context, led *ledger, point, n int, c *child) error {
	deadline := time.Now().Add(completeDeadline)
	for {
		keys, _, err := led.counts(ctx)
		if err != nil {
			return err
		}
		if keys >= point && (c.g.load(gaugeCalls) > 0 || keys >= n) {
			return nil
		}
		if err := c.exited(); err != nil {
			return fmt.Errorf("child %d (run %d) exited while the ledger held %d keys, before its kill at %d: %v\n%s", c.idx, c.runs, keys, point, err, c.tail(30))
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("child %d (run %d): %v after its start the ledger holds %d keys and its handler was called %d times; its kill waits for %d keys and a call",
				c.idx, c.runs, completeDeadline, keys, c.g.load(gaugeCalls), point)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// awaitLedger waits until the ledger holds n keys and then until every
// child is connected and no child's Delivered counter has moved for
// quietFor (so whatever the queue still held, redeliveries and retry
// copies, has been dealt with). It gives up when the connected children
// have been idle for idleLimit with keys missing, or after
// completeDeadline.
func awaitLedger(ctx context.Context, led *ledger, n int, children []*child) error {
	deadline := time.Now().Add(completeDeadline)
	last := make([]uint64, len(children))
	since := time.Now() // the last time a delivery was seen
	for {
		keys, _, err := led.counts(ctx)
		if err != nil {
			return err
		}
		moved, connected := false, true
		for i, c := range children {
			if err := c.exited(); err != nil {
				return fmt.Errorf("child %d exited before the end (ledger: %d of %d keys): %v", c.idx, keys, n, err)
			}
			s, err := readSnapshot(c.metricsPath)
			if err != nil {
				return err
			}
			if s.Metrics.Delivered != last[i] {
				last[i], moved = s.Metrics.Delivered, true
			}
			connected = connected && s.Connects > 0
		}
		if moved || !connected {
			// A child still connecting has not been offered what the
			// queue holds: its silence means nothing yet.
			since = time.Now()
		}
		idle := time.Since(since)
		switch {
		case keys >= n && idle >= quietFor:
			return nil
		case keys < n && idle >= idleLimit:
			return fmt.Errorf("the ledger holds %d of %d keys and the consumers have received nothing for %v", keys, n, idleLimit)
		case time.Now().After(deadline):
			return fmt.Errorf("after %v the ledger holds %d of %d keys and the consumers are still receiving (delivered: %v)", completeDeadline, keys, n, last)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// child is one consumer process slot, restarted after every kill.
type child struct {
	idx         int
	exe         string
	env         []string
	g           *gauges
	metricsPath string
	logPath     string
	log         *os.File
	runs        int
	cmd         *exec.Cmd
	done        chan struct{} // closed when cmd has been waited for
	waitErr     error
}

func newChild(exe string, cfg *Config, i int) (*child, error) {
	env, err := cfg.environ(i)
	if err != nil {
		return nil, err
	}
	g, err := openGauges(cfg.gaugePath(i), true)
	if err != nil {
		return nil, err
	}
	logPath := filepath.Join(cfg.Dir, fmt.Sprintf("child.%d.log", i))
	f, err := os.Create(logPath)
	if err != nil {
		g.close()
		return nil, err
	}
	return &child{idx: i, exe: exe, env: env, g: g, metricsPath: cfg.metricsPath(i), logPath: logPath, log: f}, nil
}

// start runs a new process in the slot, with zeroed gauges and no
// metrics file.
func (c *child) start() error {
	c.g.reset()
	if err := os.Remove(c.metricsPath); err != nil && !os.IsNotExist(err) {
		return err
	}
	c.runs++
	fmt.Fprintf(c.log, "=== child %d, run %d\n", c.idx, c.runs)
	cmd := exec.Command(c.exe, "-test.run=^$", "-test.count=1", "-test.timeout=0") // TestMain runs the child
	cmd.Env = c.env
	cmd.Stdout, cmd.Stderr = c.log, c.log
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("crashtest: start child %d: %w", c.idx, err)
	}
	c.cmd, c.done, c.waitErr = cmd, make(chan struct{}), nil
	go func(done chan struct{}) {
		c.waitErr = cmd.Wait()
		close(done)
	}(c.done)
	return nil
}

// exited returns an error when the current process has exited.
func (c *child) exited() error {
	select {
	case <-c.done:
		return fmt.Errorf("exit: %v", c.waitErr)
	default:
		return nil
	}
}

// kill freezes the process with SIGSTOP, reads how many deliveries are in
// each window, then kills it with SIGKILL and waits for it to go.
func (c *child) kill() (effect, settled, calls int64, err error) {
	pid := c.cmd.Process.Pid
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		return 0, 0, 0, fmt.Errorf("crashtest: SIGSTOP child %d: %w", c.idx, err)
	}
	if err := awaitStopped(pid, exitDeadline); err != nil {
		return 0, 0, 0, fmt.Errorf("crashtest: child %d: %w", c.idx, err)
	}
	effect, settled, calls = c.g.load(gaugeEffect), c.g.load(gaugeSettled), c.g.load(gaugeCalls)
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		return 0, 0, 0, fmt.Errorf("crashtest: SIGKILL child %d: %w", c.idx, err)
	}
	select {
	case <-c.done:
	case <-time.After(exitDeadline):
		return 0, 0, 0, fmt.Errorf("crashtest: child %d did not exit within %v of SIGKILL", c.idx, exitDeadline)
	}
	return effect, settled, calls, nil
}

// awaitStopped waits until every thread of pid is in the stopped state
// (Linux /proc); where there is no /proc it gives the signal a moment.
func awaitStopped(pid int, d time.Duration) error {
	tasks := fmt.Sprintf("/proc/%d/task", pid)
	if _, err := os.Stat(tasks); err != nil {
		time.Sleep(50 * time.Millisecond)
		return nil
	}
	deadline := time.Now().Add(d)
	for {
		all, err := allStopped(tasks)
		if err != nil {
			return err
		}
		if all {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not stopped %v after SIGSTOP", d)
		}
		time.Sleep(time.Millisecond)
	}
}

// allStopped reports whether every task under /proc/<pid>/task is in
// state T (stopped).
func allStopped(tasks string) (bool, error) {
	ents, err := os.ReadDir(tasks)
	if err != nil {
		return false, err
	}
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join(tasks, e.Name(), "stat"))
		if err != nil {
			return false, err
		}
		// "pid (comm) S ...": the state follows the last ')'.
		i := bytes.LastIndexByte(b, ')')
		if i < 0 || i+2 >= len(b) {
			return false, fmt.Errorf("unreadable %s/stat", e.Name())
		}
		if b[i+2] != 'T' && b[i+2] != 't' {
			return false, nil
		}
	}
	return true, nil
}

// stop ends the process gracefully with SIGTERM and waits for it.
func (c *child) stop() error {
	if err := c.exited(); err != nil {
		return fmt.Errorf("crashtest: child %d had already exited: %v", c.idx, err)
	}
	if err := c.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		return fmt.Errorf("crashtest: SIGTERM child %d: %w", c.idx, err)
	}
	select {
	case <-c.done:
	case <-time.After(stopDeadline):
		return fmt.Errorf("crashtest: child %d did not stop within %v of SIGTERM", c.idx, stopDeadline)
	}
	if c.waitErr != nil {
		return fmt.Errorf("crashtest: child %d stopped with %v:\n%s", c.idx, c.waitErr, c.tail(30))
	}
	return nil
}

// cleanup kills a process still running (a failed test) and releases the
// slot's files.
func (c *child) cleanup() {
	if c.cmd != nil && c.exited() == nil {
		_ = c.cmd.Process.Kill()
		<-c.done
	}
	c.g.close()
	c.log.Close()
}

// tail returns the last n lines of the slot's log.
func (c *child) tail(n int) string {
	b, err := os.ReadFile(c.logPath)
	if err != nil {
		return err.Error()
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
