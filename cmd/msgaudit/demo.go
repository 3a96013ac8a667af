package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/acemq/msgaudit/cmd/msgaudit/internal/brokermodel"
	"github.com/acemq/msgaudit/idempotency"
	"github.com/acemq/msgaudit/internal/redact"
	"github.com/acemq/msgaudit/internal/testkit/tcpproxy"
	"github.com/go-stomp/stomp/v3"
	"github.com/go-stomp/stomp/v3/frame"
	"github.com/schollz/progressbar/v3"
)

// demoKeyHeader carries the producer-chosen key the ledger is keyed on: the
// UNIQUE constraint on it detects a message applied twice. Duplicate
// detection itself keys on the broker's message id.
const demoKeyHeader = "x-demo-key"

// demoConfig is the demo's command line.
type demoConfig struct {
	n, producers, workers, prefetch int
	guard, store                    string
	stomp, nats                     string
	queue                           string
	failRate, panicRate             float64
	kills, cuts, replays, replayN   int
	restarts, maxAttempts           int
	seed                            uint64
	timeout                         time.Duration
	progress                        bool
	chain                           bool
	// loseKey is a test hook, not a flag: the consumer acknowledges this
	// demo key without applying it.
	loseKey string
	// dupKey and ghostKey are test hooks of -chain, not flags: the relay
	// publishes the message of demo key dupKey a second time under a new
	// outbox id; consumer A sends the message of ghostKey outside the
	// delivery's transaction, which then fails (the bug the outbox
	// prevents).
	dupKey, ghostKey string
	// unorderedB is a test hook of -chain: consumer B starts a second
	// late and hands its deliveries to its workers as they come, not by
	// order key, so a retried message is overtaken by the next one of its
	// key.
	unorderedB bool
}

const demoAbout = `msgaudit demo: exactly-once processing under injected faults, SIGKILL included.

Producers send -n messages; a consumer — a child process — runs each
through the duplicate pipeline into a ledger, an SQLite table with a UNIQUE
constraint on each message's key, so a message applied twice is detected.
Meanwhile the consumer is killed with SIGKILL at random points (-kills) and
restarted, its connection is cut mid-delivery, its handler fails and
panics, it is restarted gracefully from a persisted audit snapshot, and
failover replays deliver copies of already-delivered messages. The exit
status is 1 if any message was lost or applied twice.

-guard picks what stands between the broker and the ledger:
  inbox  the connection audit, then a transactional inbox: the message's
         key is recorded in the ledger's own database transaction, so a
         SIGKILL leaves both the effect and the record, or neither (default)
  store  the connection audit, then an external idempotency store (-store),
         committed apart from the ledger: a SIGKILL between the two applies
         a message twice. Shown for comparison: its double applies are
         reported, and do not fail the exit status
  none   nothing: every delivery is applied; applied twice > 0, exit 1

Without -stomp or -nats the demo runs on an in-process broker MODEL (package
brokermodel): a model of ActiveMQ's delivery behaviour for tests and this
demo, NOT a broker. It lives in the parent process, which serves it to the
consumer over a unix socket: a killed consumer's connection closes, and
everything it had not acknowledged is redelivered. Real deployments use a
real broker: pass -stomp host:port[,host:port...] to run the same demo
against ActiveMQ over STOMP, or -nats nats://host:port against NATS
JetStream (failover replays are then produced by the connection cuts and
kills themselves). With -nats the demo creates a work-queue stream named
after -queue ("/queue/a.b" gives "a_b") and its dead-letter stream, and
deletes both at the end.

-chain runs a chain of three child processes on the broker model: consumer
A applies each message with the inbox and, in the same transaction, sends
one message to a second queue with the transactional outbox (package
outbox); a relay process publishes A's committed messages to the model; a
consumer B applies them with an inbox keyed by their outbox id. A, the
relay and B are killed with SIGKILL in turn (-kills, 18 by default with
-chain), and the table counts what A and B applied, messages lost between
the producers and B, applied twice by A or B, ghosts (applied by B, their
incoming message not committed by A) and per-key order violations (B
applying a producer's messages out of A's commit order); the exit status is
1 if any of the four is not 0. -chain runs on the broker model only;
-stomp and -nats are refused with it (real brokers: not yet).

Limits: -n and -replay-size at most 1000000; -producers and -workers at
most 1024; -prefetch at most 65536; -kills, -cuts, -replays, -restarts and
-max-attempts at most 1000. -timeout bounds the whole run, set-up included;
SIGINT and SIGTERM stop it at any point.

Flags:
`

// Bounds of the demo's flags. The broker model holds every message sent
// and not yet consumed, so -n bounds its memory (a few hundred bytes a
// message).
const (
	maxDemoN        = 1_000_000 // -n, -replay-size
	maxDemoConc     = 1024      // -producers, -workers
	maxDemoPrefetch = 65536     // -prefetch
	maxDemoFaults   = 1000      // -kills, -cuts, -replays, -restarts, -max-attempts
	// defaultChainKills is -kills under -chain: six each for consumer A,
	// the relay and consumer B.
	defaultChainKills = 18
)

func parseDemoFlags(args []string, stderr io.Writer) (demoConfig, error) {
	var c demoConfig
	fs := flag.NewFlagSet("msgaudit demo", flag.ContinueOnError)
	fs.SetOutput(io.Discard) // errors are returned, -h is printed below
	fs.IntVar(&c.n, "n", 20000, "messages to send")
	fs.IntVar(&c.producers, "producers", 4, "producers (each its own connection, so its own producer id)")
	fs.IntVar(&c.workers, "workers", 4, "consumer handler goroutines")
	fs.IntVar(&c.prefetch, "prefetch", 100, "consumer prefetch")
	fs.StringVar(&c.guard, "guard", guardInbox, "duplicate guard: inbox | store | none (see above)")
	fs.StringVar(&c.store, "store", "", "with -guard store: memory | sqlite:PATH | redis://... | postgres://... (default: SQLite in the run's temp dir)")
	fs.StringVar(&c.stomp, "stomp", "", "ActiveMQ STOMP address(es), comma-separated; empty, and no -nats, = the in-process broker MODEL")
	fs.StringVar(&c.nats, "nats", "", "NATS JetStream URL (nats://host:port); empty, and no -stomp, = the in-process broker MODEL")
	fs.StringVar(&c.queue, "queue", "", "queue name (default /queue/msgaudit.demo.<random>); with -nats, the stream is named after it")
	fs.Float64Var(&c.failRate, "fail-rate", 0.10, "probability that a handler attempt returns an error")
	fs.Float64Var(&c.panicRate, "panic-rate", 0.01, "probability that a handler attempt panics")
	fs.IntVar(&c.kills, "kills", 5, "times the consumer process is killed with SIGKILL (at random points) and restarted")
	fs.IntVar(&c.cuts, "cuts", 3, "connection cuts while deliveries are in the consumer (-stomp, -nats: a TCP proxy in front of the broker drops them)")
	fs.IntVar(&c.replays, "replays", 3, "failover replays (model only)")
	fs.IntVar(&c.replayN, "replay-size", 100, "recently delivered messages copied per replay (model only)")
	fs.IntVar(&c.restarts, "restarts", 1, "graceful consumer restarts from the persisted audit snapshot")
	fs.IntVar(&c.maxAttempts, "max-attempts", 10, "handler attempts before a message is dead-lettered")
	fs.Uint64Var(&c.seed, "seed", 1, "seed of the injected faults")
	fs.DurationVar(&c.timeout, "timeout", 5*time.Minute, "give up (and count what is missing as lost) after this long, set-up included")
	fs.BoolVar(&c.progress, "progress", demoIsTerminal(stderr), "show a progress bar on stderr (default: when stderr is a terminal)")
	fs.BoolVar(&c.chain, "chain", false, "consumer A → outbox → relay → queue B → consumer B, each a child process killed in turn (see above; model only)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprint(stderr, demoAbout)
			fs.SetOutput(stderr)
			fs.PrintDefaults()
		}
		return c, err
	}
	positive := []struct {
		name   string
		v, max int
	}{{"-n", c.n, maxDemoN}, {"-producers", c.producers, maxDemoConc}, {"-workers", c.workers, maxDemoConc},
		{"-prefetch", c.prefetch, maxDemoPrefetch}, {"-max-attempts", c.maxAttempts, maxDemoFaults}}
	for _, f := range positive {
		if f.v <= 0 {
			return c, fmt.Errorf("%s must be positive, got %d", f.name, f.v)
		}
		if f.v > f.max {
			return c, fmt.Errorf("%s must be at most %d, got %d", f.name, f.max, f.v)
		}
	}
	nonNegative := []struct {
		name   string
		v, max int
	}{{"-kills", c.kills, maxDemoFaults}, {"-cuts", c.cuts, maxDemoFaults}, {"-replays", c.replays, maxDemoFaults},
		{"-replay-size", c.replayN, maxDemoN}, {"-restarts", c.restarts, maxDemoFaults}}
	for _, f := range nonNegative {
		if f.v < 0 {
			return c, fmt.Errorf("%s must be >= 0, got %d", f.name, f.v)
		}
		if f.v > f.max {
			return c, fmt.Errorf("%s must be at most %d, got %d", f.name, f.max, f.v)
		}
	}
	switch {
	case fs.NArg() > 0:
		return c, fmt.Errorf("unexpected arguments %q", fs.Args())
	case !(c.failRate >= 0 && c.failRate < 1):
		return c, fmt.Errorf("-fail-rate must be in [0, 1), got %v", c.failRate)
	case !(c.panicRate >= 0 && c.panicRate < 1):
		return c, fmt.Errorf("-panic-rate must be in [0, 1), got %v", c.panicRate)
	case c.failRate+c.panicRate >= 1:
		return c, fmt.Errorf("-fail-rate + -panic-rate must be below 1, got %v + %v", c.failRate, c.panicRate)
	case c.timeout <= 0:
		return c, fmt.Errorf("-timeout must be positive, got %v", c.timeout)
	case c.guard != guardInbox && c.guard != guardStore && c.guard != guardNone:
		return c, fmt.Errorf("-guard must be inbox, store or none, got %q", c.guard)
	case c.store != "" && c.guard != guardStore:
		return c, fmt.Errorf("-store is only used with -guard store (got -guard %s)", c.guard)
	case c.stomp != "" && c.nats != "":
		return c, errors.New("-stomp and -nats name two brokers; pick one")
	case c.queue != "" && !strings.HasPrefix(c.queue, "/queue/"):
		return c, fmt.Errorf("-queue must start with /queue/, got %q", c.queue)
	case c.chain && (c.stomp != "" || c.nats != ""):
		return c, errors.New("-chain runs on the broker model; real brokers: not yet (drop -stomp and -nats)")
	case c.chain && c.guard != guardInbox:
		return c, fmt.Errorf("-chain needs -guard inbox: the outbox sends in the inbox's transaction (got -guard %s)", c.guard)
	}
	if c.chain {
		set := map[string]bool{}
		fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
		if !set["kills"] {
			c.kills = defaultChainKills
		}
	}
	if c.producers > c.n {
		c.producers = c.n
	}
	return c, nil
}

// demoIsTerminal reports whether w is a terminal (a character device).
func demoIsTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

// runDemo runs the demo and returns the exit status: 0 when every message
// was applied exactly once, 1 when one was lost or applied twice or the
// demo failed, 2 for bad flags. In a process started as a demo consumer
// (demoChildEnv set) it runs the consumer instead.
func runDemo(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if path := os.Getenv(demoChildEnv); path != "" {
		return runDemoChild(ctx, path, stderr)
	}
	cfg, err := parseDemoFlags(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintln(stderr, "msgaudit demo:", err)
		fmt.Fprintln(stderr, "run 'msgaudit demo -h' for usage")
		return 2
	}
	if cfg.chain {
		rep, err := demoChain(ctx, cfg, stderr)
		if err != nil {
			fmt.Fprintln(stderr, "msgaudit demo:", err)
			return 1
		}
		rep.print(stdout)
		return rep.exitCode()
	}
	rep, err := demo(ctx, cfg, stderr)
	if err != nil {
		fmt.Fprintln(stderr, "msgaudit demo:", err)
		return 1
	}
	rep.print(stdout)
	return rep.exitCode()
}

// exitCode is 1 when a message was lost or applied twice, or the run timed
// out; else 0. Under -guard store, applied twice is expected and does not
// count.
func (r demoReport) exitCode() int {
	if r.lost > 0 || r.timedOut || (r.twice > 0 && r.guard != guardStore) {
		return 1
	}
	return 0
}

// demoReport is the demo's outcome.
type demoReport struct {
	mode, guard, guardDesc string
	sent                   uint64
	st                     demoStats // the consumers' counters, summed
	deliveries, redelivs   uint64
	cuts, replayed         uint64
	kills, restarts        uint64
	applied, lost, twice   int64
	dlqDepth, leftOnBroker int
	elapsed                time.Duration
	timedOut               bool
}

func (r demoReport) print(w io.Writer) {
	fmt.Fprintf(w, "msgaudit demo on %s\nguard: %s\n", r.mode, r.guardDesc)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	row := func(k string, v any, note string) {
		fmt.Fprintf(tw, "  %s\t%v\t%s\n", k, v, note)
	}
	s := r.st
	row("sent", r.sent, "")
	row("delivered", r.deliveries, "deliveries handed to the consumer")
	row("redeliveries", r.redelivs, "with the redelivered flag")
	if r.guard == guardNone {
		row("duplicates absorbed", 0, fmt.Sprintf("none: no pipeline (%d duplicates the consumer knew of were applied again)", s.AppliedAgain))
	} else {
		tier := "store"
		if r.guard == guardInbox {
			tier = "inbox"
		}
		note := fmt.Sprintf("audit %d, %s %d, in-flight %d", s.DupAudit, tier, s.DupStore+s.DupOther, s.DupInFlight)
		if r.guard == guardStore {
			note += " (in-flight counts each deferral while a claim, a killed consumer's too, lasts)"
		}
		row("duplicates absorbed", s.DupAudit+s.DupStore+s.DupInFlight+s.DupOther, note)
	}
	row("retries", s.Retries, fmt.Sprintf("handler failures %d (panics %d)", s.Failures, s.Panics))
	row("dead-lettered", r.dlqDepth, "distinct messages in the dead-letter queue after -max-attempts")
	row("consumer kills", r.kills, "SIGKILL at a random point, then a new consumer process")
	row("connection cuts", r.cuts, fmt.Sprintf("one per graceful restart included; reconnects %d, acks lost with their connection %d", s.Reconnects, s.AckLost))
	row("failover replays", r.replayed, "copies of already-delivered messages")
	row("consumer restarts", r.restarts, "graceful, from the persisted audit snapshot")
	row("applied", r.applied, "ledger rows")
	row("left on the broker", r.leftOnBroker, "deliveries never acknowledged, at the end")
	row("lost", r.lost, "must be 0")
	if r.guard == guardStore {
		row("applied twice", r.twice, "can be > 0 with kills: the store's record and the ledger commit apart")
	} else {
		row("applied twice", r.twice, "must be 0")
	}
	mean := time.Duration(0)
	if s.StoreCalls > 0 {
		mean = time.Duration(s.StoreNanos / s.StoreCalls)
	}
	call := ""
	switch r.guard {
	case guardInbox:
		call = fmt.Sprintf("mean inbox call %v", mean.Round(time.Microsecond))
	case guardStore:
		call = fmt.Sprintf("mean store call %v", mean.Round(time.Microsecond))
	}
	row("elapsed", r.elapsed.Round(time.Millisecond), call)
	row("throughput", fmt.Sprintf("%.0f msgs/s", float64(r.sent)/math.Max(r.elapsed.Seconds(), 1e-9)), "")
	tw.Flush()
	if r.kills > 0 {
		fmt.Fprintln(w, "(counters of a killed consumer are as of its last report, at most 20ms before its death;"+
			" sent, applied, applied twice, lost and the broker's counts are exact)")
	}
	switch {
	case r.timedOut:
		fmt.Fprintln(w, "FAIL: timed out before every message was accounted for")
	case r.lost > 0:
		fmt.Fprintln(w, "FAIL: messages lost")
	case r.twice > 0 && r.guard == guardStore:
		fmt.Fprintf(w, "NOTE: %d applied twice, as expected with -guard store: a consumer killed after its ledger commit and"+
			" before the store's confirm leaves an effect the store does not know of; -guard inbox commits both together."+
			" This run's exit status is 0: the comparison does not fail the demo.\n", r.twice)
	case r.twice > 0:
		fmt.Fprintln(w, "FAIL: messages applied twice")
	case r.dlqDepth > 0:
		fmt.Fprintf(w, "OK: nothing lost, nothing applied twice (%d messages dead-lettered after -max-attempts)\n", r.dlqDepth)
	default:
		fmt.Fprintln(w, "OK: every message applied exactly once")
	}
}

// demoRun holds the parent's state: the producers, the consumer process,
// the fault plan and the accounting.
type demoRun struct {
	cfg     demoConfig
	dir     string
	stderr  io.Writer
	ledger  *demoLedger // the parent's read-only view of the consumer's ledger
	proc    *demoProcs
	dlq     map[string]bool // demo keys found in the dead-letter queue at the end
	sent    atomic.Uint64
	cuts    atomic.Uint64
	applied atomic.Int64 // ledger rows, as last counted
	// finished is when every message was accounted for (the clock stops
	// there; shutdown and the final accounting are not throughput).
	finished time.Time
	// sig is the run's context without -timeout: the final accounting
	// (the drains of a real broker included) runs after a timeout too.
	sig context.Context
}

// demoKeys calls f with every demo key, producer by producer: producer p
// sends keys p, p+producers, ... of 0..n-1 (they are never all held).
func demoKeys(n, producers int, f func(key string)) {
	for p := range producers {
		for i := p; i < n; i += producers {
			f(demoKey(p, i))
		}
	}
}

func demoKey(p, i int) string { return fmt.Sprintf("p%d-%d", p, i) }

// demo runs the demo. cfg.timeout bounds everything up to the final
// accounting, which only signals (ctx) stop.
func demo(ctx context.Context, cfg demoConfig, stderr io.Writer) (demoReport, error) {
	rep, err := demoRunTimed(ctx, cfg, stderr)
	if err != nil && ctx.Err() == nil && errors.Is(err, context.DeadlineExceeded) {
		err = fmt.Errorf("-timeout %v passed: %w", cfg.timeout, err)
	}
	return rep, err
}

func demoRunTimed(sig context.Context, cfg demoConfig, stderr io.Writer) (demoReport, error) {
	ctx, cancel := context.WithTimeout(sig, cfg.timeout)
	defer cancel()
	dir, err := os.MkdirTemp("", "msgaudit-demo-")
	if err != nil {
		return demoReport{}, err
	}
	defer os.RemoveAll(dir)
	if cfg.queue == "" {
		cfg.queue = fmt.Sprintf("/queue/msgaudit.demo.%d", time.Now().UnixNano())
	}
	rep := demoReport{guard: cfg.guard}
	storeURL := ""
	switch cfg.guard {
	case guardInbox:
		rep.guardDesc = "inbox (connection audit + transactional inbox in the ledger's SQLite database)"
	case guardNone:
		rep.guardDesc = "none (no duplicate pipeline: every delivery is applied)"
	case guardStore:
		storeURL = cfg.store
		if storeURL == "" {
			// The store lives in a temp dir deleted at exit, so fsync on
			// every commit would buy nothing; NORMAL survives a SIGKILL.
			storeURL = "sqlite:" + filepath.Join(dir, "idempotency.db") + "?_pragma=synchronous(NORMAL)"
		}
		// Open it once here, so a bad -store is reported before anything
		// starts; each consumer process opens its own.
		st, err := idempotency.Open(ctx, storeURL, idempotency.Options{})
		if errors.Is(err, idempotency.ErrUnsupportedURL) {
			return rep, fmt.Errorf("-store %q: unsupported (want memory, sqlite:PATH, redis://..., rediss://..., redis+cluster://..., redis+sentinel://..., postgres://... or postgresql://...)",
				redact.URL(storeURL))
		}
		if err != nil {
			return rep, fmt.Errorf("-store %s: %s", redact.URL(storeURL), strings.TrimPrefix(err.Error(), "idempotency: "))
		}
		st.Close()
		rep.guardDesc = "store (connection audit + idempotency store " + redact.URL(storeURL) + ", committed apart from the ledger)"
	}
	led, err := openDemoLedger(filepath.Join(dir, "ledger.db"))
	if err != nil {
		return rep, fmt.Errorf("ledger: %w", err)
	}
	defer led.close()
	exe, err := os.Executable()
	if err != nil {
		return rep, fmt.Errorf("cannot find the msgaudit executable to start the consumer: %w", err)
	}
	ctl, err := net.Listen("unix", filepath.Join(dir, "control.sock"))
	if err != nil {
		return rep, err
	}
	defer ctl.Close()
	d := &demoRun{cfg: cfg, dir: dir, stderr: stderr, ledger: led, sig: sig}
	d.proc = &demoProcs{exe: exe, dir: dir, ctl: ctl, stderr: &demoLockedWriter{w: stderr}, base: demoChildConfig{
		Guard: cfg.guard, Queue: cfg.queue, ControlSock: ctl.Addr().String(), DB: filepath.Join(dir, "ledger.db"),
		Store: storeURL, Namespace: "msgaudit-demo" + cfg.queue, Workers: cfg.workers, Prefetch: cfg.prefetch,
		MaxAttempts: cfg.maxAttempts, FailRate: cfg.failRate, PanicRate: cfg.panicRate, Seed: cfg.seed, LoseKey: cfg.loseKey,
	}}
	var bar *progressbar.ProgressBar
	if cfg.progress {
		bar = progressbar.NewOptions(cfg.n, progressbar.OptionSetWriter(stderr), progressbar.OptionSetDescription("applied or dead-lettered"),
			progressbar.OptionShowCount(), progressbar.OptionThrottle(100*time.Millisecond), progressbar.OptionSetWidth(30),
			progressbar.OptionShowIts(), progressbar.OptionSetItsString("msg"))
	}
	start := time.Now()
	switch {
	case cfg.stomp != "":
		err = d.runStomp(ctx, &rep, bar)
	case cfg.nats != "":
		err = d.runNATS(ctx, &rep, bar)
	default:
		err = d.runModel(ctx, &rep, bar)
	}
	d.proc.shutdown()
	rep.elapsed = time.Since(start)
	if !d.finished.IsZero() {
		rep.elapsed = d.finished.Sub(start)
	}
	if bar != nil {
		_ = bar.Finish()
		fmt.Fprintln(stderr)
	}
	if err != nil {
		return rep, err
	}
	if rep.applied, err = led.count(sig); err != nil {
		return rep, fmt.Errorf("ledger: %w", err)
	}
	if rep.twice, err = led.twice(sig); err != nil {
		return rep, fmt.Errorf("ledger: %w", err)
	}
	inLedger, err := led.keys(sig)
	if err != nil {
		return rep, fmt.Errorf("ledger: %w", err)
	}
	rep.sent = d.sent.Load()
	rep.st = d.proc.totals()
	rep.cuts = d.cuts.Load()
	if rep.deliveries == 0 {
		rep.deliveries, rep.redelivs = rep.st.Delivered, rep.st.Redelivered
	}
	// Lost: keys sent but neither in the ledger nor in the dead-letter
	// queue.
	demoKeys(cfg.n, cfg.producers, func(k string) {
		if !inLedger[k] && !d.dlq[k] {
			rep.lost++
		}
	})
	rep.dlqDepth = len(d.dlq)
	return rep, nil
}

// demoFault is one fault of the plan, due when the messages accounted for
// reach its fraction of n.
type demoFault struct {
	at   float64
	kind string // "kill", "cut", "replay", "restart"
}

// demoMilestones returns k fractions of the run spread over (lo, hi).
func demoMilestones(k int, lo, hi float64) []float64 {
	out := make([]float64, k)
	for i := range out {
		out[i] = lo + (hi-lo)*float64(i+1)/float64(k+1)
	}
	return out
}

// plan returns the faults in order. Kills fall at seeded random points;
// the other faults are spread evenly.
func (d *demoRun) plan() []demoFault {
	var fs []demoFault
	rng := rand.New(rand.NewPCG(d.cfg.seed, 0x6b696c6c))
	for range d.cfg.kills {
		fs = append(fs, demoFault{0.03 + 0.92*rng.Float64(), "kill"})
	}
	for _, at := range demoMilestones(d.cfg.cuts, 0.05, 0.9) {
		fs = append(fs, demoFault{at, "cut"})
	}
	if d.cfg.stomp == "" && d.cfg.nats == "" {
		for _, at := range demoMilestones(d.cfg.replays, 0.1, 0.95) {
			fs = append(fs, demoFault{at, "replay"})
		}
	}
	for _, at := range demoMilestones(d.cfg.restarts, 0.2, 0.8) {
		fs = append(fs, demoFault{at, "restart"})
	}
	slices.SortStableFunc(fs, func(a, b demoFault) int {
		switch {
		case a.at < b.at:
			return -1
		case a.at > b.at:
			return 1
		}
		return 0
	})
	return fs
}

// drive starts the consumer and runs the fault plan against the progress
// of the ledger until settled says the broker has nothing left for the
// consumer, or the timeout passes. settled is told whether every key is
// accounted for (applied or dead-lettered): when not, messages were lost,
// and a check that cannot see the broker should wait longer before it
// concludes so. deadLettered returns the dead letters so far.
func (d *demoRun) drive(ctx context.Context, rep *demoReport, bar *progressbar.ProgressBar,
	cut func(), replay func(), deadLettered func() int64, settled func(all bool) bool) error {
	snapshot := filepath.Join(d.dir, "audit.snapshot")
	if err := d.proc.start(ctx, ""); err != nil {
		return err
	}
	faults := d.plan()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		if err := d.proc.exitedByItself(); err != nil {
			return err
		}
		applied, err := d.ledger.count(ctx)
		if err != nil {
			if ctx.Err() == context.DeadlineExceeded {
				rep.timedOut = true
				return nil
			}
			return fmt.Errorf("ledger: %w", err)
		}
		d.applied.Store(applied)
		// Progress counts messages accounted for: applied or dead-lettered.
		done := applied + deadLettered()
		if bar != nil {
			_ = bar.Set64(min(done, int64(d.cfg.n)))
		}
		for len(faults) > 0 && float64(done) >= faults[0].at*float64(d.cfg.n) {
			f := faults[0]
			faults = faults[1:]
			switch f.kind {
			case "kill":
				if err := d.proc.kill(); err != nil {
					return err
				}
				rep.kills++
				// A killed consumer leaves no audit snapshot: the next
				// one starts empty, knowing only what durable state knows.
				if err := d.proc.start(ctx, ""); err != nil {
					return err
				}
			case "cut":
				cut()
			case "replay":
				replay()
			case "restart":
				// Cut first, so acks of the deliveries still running are
				// lost and come back after the restart; then stop (running
				// handlers finish and settle, the audit is persisted) and
				// start a consumer from the snapshot.
				cut()
				if err := d.proc.stop(); err != nil {
					return err
				}
				rep.restarts++
				if err := d.proc.start(ctx, snapshot); err != nil {
					return err
				}
			}
		}
		if done >= int64(d.cfg.n) && d.finished.IsZero() {
			d.finished = time.Now() // every message accounted for: the clock stops
		}
		if settled(done >= int64(d.cfg.n)) {
			return d.proc.stop()
		}
		select {
		case <-ctx.Done():
			if ctx.Err() == context.DeadlineExceeded {
				rep.timedOut = true
				return nil
			}
			return ctx.Err()
		case <-tick.C:
		}
	}
}

// ---- the broker model ----

func (d *demoRun) runModel(ctx context.Context, rep *demoReport, bar *progressbar.ProgressBar) error {
	rep.mode = "the in-process broker MODEL (not a real broker; -stomp runs on ActiveMQ, -nats on NATS JetStream)"
	b := brokermodel.New(brokermodel.Options{})
	defer b.Close()
	ln, err := net.Listen("unix", filepath.Join(d.dir, "broker.sock"))
	if err != nil {
		return err
	}
	srv := serveModel(b, ln)
	defer srv.Close()
	d.proc.base.BrokerSock = ln.Addr().String()

	var pwg sync.WaitGroup
	perr := make(chan error, d.cfg.producers)
	for p := range d.cfg.producers {
		pwg.Add(1)
		go func() {
			defer pwg.Done()
			c, err := b.Connect()
			if err != nil {
				perr <- err
				return
			}
			defer c.Close()
			for i := p; i < d.cfg.n && ctx.Err() == nil; i += d.cfg.producers {
				key := demoKey(p, i)
				_, err := c.Send(d.cfg.queue, []byte("payload of "+key), brokermodel.SendOptions{
					Persistent: true, Headers: map[string]string{demoKeyHeader: key}})
				if err != nil {
					perr <- err
					return
				}
				d.sent.Add(1)
			}
		}()
	}
	defer pwg.Wait()

	var producerErr error
	err = d.drive(ctx, rep, bar,
		func() { d.cuts.Add(uint64(srv.Cut())) },
		func() { b.Replay(d.cfg.queue, d.cfg.replayN, true) },
		func() int64 { p, f := b.Depth(brokermodel.DLQ); return int64(p + f) },
		func(bool) bool {
			select {
			case producerErr = <-perr:
				return true // a producer failed: stop waiting for what it never sent
			default:
			}
			p, f := b.Depth(d.cfg.queue)
			return p == 0 && f == 0 && d.sent.Load() == uint64(d.cfg.n)
		})
	if err == nil && producerErr != nil {
		err = fmt.Errorf("producer: %w", producerErr)
	}
	st := b.Stats()
	rep.deliveries, rep.redelivs, rep.replayed = st.Delivered, st.Redelivered, st.Replayed
	pending, inFlight := b.Depth(d.cfg.queue)
	rep.leftOnBroker = pending + inFlight
	d.dlq = map[string]bool{}
	for _, m := range b.Browse(brokermodel.DLQ) {
		d.dlq[m.Headers[demoKeyHeader]] = true
	}
	return err
}

// ---- real ActiveMQ over STOMP ----

func (d *demoRun) runStomp(ctx context.Context, rep *demoReport, bar *progressbar.ProgressBar) error {
	addrs := strings.Split(d.cfg.stomp, ",")
	rep.mode = "ActiveMQ over STOMP at " + d.cfg.stomp
	// The consumer connects through TCP proxies the demo can cut.
	var proxies []*tcpproxy.Proxy
	for _, a := range addrs {
		p, err := tcpproxy.New(strings.TrimSpace(a), tcpproxy.Options{})
		if err != nil {
			return err
		}
		defer p.Close()
		proxies = append(proxies, p)
		d.proc.base.Stomp = append(d.proc.base.Stomp, p.Addr())
	}
	d.proc.base.DLQ = d.dlqName()
	perr := make(chan error, d.cfg.producers)
	var pwg sync.WaitGroup
	for p := range d.cfg.producers {
		pwg.Add(1)
		go func() {
			defer pwg.Done()
			if err := d.produceStomp(ctx, strings.TrimSpace(addrs[p%len(addrs)]), p); err != nil {
				perr <- err
			}
		}()
	}
	defer pwg.Wait()
	err := d.drive(ctx, rep, bar,
		func() {
			for _, p := range proxies {
				d.cuts.Add(uint64(p.Cut()))
			}
		},
		func() {},
		func() int64 { return int64(d.proc.totals().DeadLettered) },
		d.quiet(time.Second, 5*time.Second))
	select {
	case e := <-perr:
		if err == nil {
			err = e
		}
	default:
	}
	if err == nil {
		d.dlq, err = demoDrainStomp(d.sig, strings.TrimSpace(addrs[0]), d.dlqName())
	}
	if err == nil {
		var left map[string]bool
		left, err = demoDrainStomp(d.sig, strings.TrimSpace(addrs[0]), d.cfg.queue)
		rep.leftOnBroker = len(left)
	}
	return err
}

// quiet returns a settled check for a broker whose queue depth the demo
// cannot read: everything was sent, and neither the consumer's deliveries
// nor the ledger moved for the period (the redeliveries of acks lost in
// cuts and kills have come back and been absorbed, or applied), or for the
// longer missing period while keys are not all accounted for.
func (d *demoRun) quiet(period, missing time.Duration) func(all bool) bool {
	var last uint64
	var lastApplied int64
	var since time.Time
	return func(all bool) bool {
		n, a := d.proc.totals().Delivered, d.applied.Load()
		if n != last || a != lastApplied || since.IsZero() {
			last, lastApplied, since = n, a, time.Now()
		}
		wait := period
		if !all {
			wait = missing
		}
		return d.sent.Load() == uint64(d.cfg.n) && time.Since(since) >= wait
	}
}

// dlqName is the demo's own dead-letter queue on a real broker (not the
// shared ActiveMQ.DLQ, which may hold other applications' messages).
func (d *demoRun) dlqName() string { return d.cfg.queue + ".DLQ" }

// demoDrainStomp consumes dest until it stays empty for a second and returns
// the demo keys it held.
func demoDrainStomp(ctx context.Context, addr, dest string) (map[string]bool, error) {
	var dialer net.Dialer
	nc, err := dialer.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	conn, err := stomp.Connect(nc, stomp.ConnOpt.HeartBeat(0, 0))
	if err != nil {
		nc.Close()
		return nil, err
	}
	defer conn.Disconnect()
	sub, err := conn.Subscribe(dest, stomp.AckAuto)
	if err != nil {
		return nil, err
	}
	defer sub.Unsubscribe()
	out := map[string]bool{}
	for {
		select {
		case m, ok := <-sub.C:
			if !ok || m.Err != nil {
				return out, nil
			}
			out[m.Header.Get(demoKeyHeader)] = true
		case <-time.After(time.Second):
			return out, nil
		case <-ctx.Done():
			return out, ctx.Err()
		}
	}
}

func (d *demoRun) produceStomp(ctx context.Context, addr string, p int) error {
	var dialer net.Dialer
	nc, err := dialer.DialContext(ctx, "tcp", addr)
	if err != nil {
		return fmt.Errorf("producer %d: %w", p, err)
	}
	conn, err := stomp.Connect(nc, stomp.ConnOpt.HeartBeat(0, 0))
	if err != nil {
		nc.Close()
		return fmt.Errorf("producer %d: %w", p, err)
	}
	defer conn.Disconnect()
	// A receipt every 100 messages (and on the last) confirms everything
	// sent before it on this connection without a round trip per message.
	var unconfirmed uint64
	for i := p; i < d.cfg.n && ctx.Err() == nil; i += d.cfg.producers {
		key := demoKey(p, i)
		opts := []func(*frame.Frame) error{stomp.SendOpt.Header("persistent", "true"), stomp.SendOpt.Header(demoKeyHeader, key)}
		unconfirmed++
		if unconfirmed == 100 || i+d.cfg.producers >= d.cfg.n {
			opts = append(opts, stomp.SendOpt.Receipt)
		}
		if err := conn.Send(d.cfg.queue, "text/plain", []byte("payload of "+key), opts...); err != nil {
			return fmt.Errorf("producer %d: %w", p, err)
		}
		if len(opts) == 3 {
			d.sent.Add(unconfirmed)
			unconfirmed = 0
		}
	}
	return nil
}
