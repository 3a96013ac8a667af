package main

import (
	"context"
	"database/sql"
	"errors"
	"flag"
	"fmt"
	"hash/fnv"
	"io"
	"math"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/acemq/msgaudit/brokermodel"
	"github.com/acemq/msgaudit/connaudit"
	"github.com/acemq/msgaudit/idempotency"
	"github.com/acemq/msgaudit/internal/tcpproxy"
	"github.com/acemq/msgaudit/receiver"
	"github.com/acemq/msgaudit/stompconsumer"
	"github.com/go-stomp/stomp/v3"
	"github.com/go-stomp/stomp/v3/frame"
	"github.com/schollz/progressbar/v3"
	_ "modernc.org/sqlite" // the ledger's database/sql driver
)

// demoKeyHeader carries the producer-chosen key the ledger is keyed on: the
// UNIQUE constraint on it detects a message applied twice. Duplicate
// detection itself keys on the broker's message id.
const demoKeyHeader = "x-demo-key"

// demoConfig is the demo's command line.
type demoConfig struct {
	n, producers, workers, prefetch int
	store                           string
	stomp                           string
	queue                           string
	failRate, panicRate             float64
	cuts, replays, replayN          int
	restarts, maxAttempts           int
	seed                            uint64
	timeout                         time.Duration
	progress                        bool
}

const demoAbout = `msgaudit demo: exactly-once processing under injected faults.

Producers send -n messages; one consumer runs each through the duplicate
pipeline (connection audit, in-flight table, durable idempotency store) into
a ledger — an SQLite table with a UNIQUE constraint on each message's key,
so a message applied twice is detected — while faults are injected:
connection cuts mid-delivery, handler failures and panics, a consumer
restart from a persisted audit snapshot and the durable store, and failover
replays of already-delivered messages. The exit status is 1 if any message
was lost or applied twice.

Without -stomp the demo runs on an in-process broker MODEL (package
brokermodel): a model of ActiveMQ's delivery behaviour for tests and this
demo, NOT a broker. Real deployments use a real broker: pass -stomp
host:port[,host:port...] to run the same demo against ActiveMQ over STOMP
(failover replays are then produced by the connection cuts themselves).

Flags:
`

func parseDemoFlags(args []string, stderr io.Writer) (demoConfig, error) {
	var c demoConfig
	fs := flag.NewFlagSet("msgaudit demo", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(stderr, demoAbout)
		fs.PrintDefaults()
	}
	fs.IntVar(&c.n, "n", 20000, "messages to send")
	fs.IntVar(&c.producers, "producers", 4, "producers (each its own connection, so its own producer id)")
	fs.IntVar(&c.workers, "workers", 4, "consumer handler goroutines")
	fs.IntVar(&c.prefetch, "prefetch", 100, "consumer prefetch")
	fs.StringVar(&c.store, "store", "", "idempotency store: memory | sqlite:PATH | redis://... | postgres://... (default: SQLite in a temp dir, synchronous=NORMAL since the dir is deleted at exit)")
	fs.StringVar(&c.stomp, "stomp", "", "ActiveMQ STOMP address(es), comma-separated; empty = the in-process broker MODEL")
	fs.StringVar(&c.queue, "queue", "", "queue name (default /queue/msgaudit.demo.<random>)")
	fs.Float64Var(&c.failRate, "fail-rate", 0.10, "probability that a handler attempt returns an error")
	fs.Float64Var(&c.panicRate, "panic-rate", 0.01, "probability that a handler attempt panics")
	fs.IntVar(&c.cuts, "cuts", 3, "connection cuts (model: as a delivery reaches the handler; -stomp: a TCP proxy in front of the broker drops every connection)")
	fs.IntVar(&c.replays, "replays", 3, "failover replays (model only)")
	fs.IntVar(&c.replayN, "replay-size", 100, "recently delivered messages copied per replay (model only)")
	fs.IntVar(&c.restarts, "restarts", 1, "consumer restarts from the persisted audit snapshot and the store")
	fs.IntVar(&c.maxAttempts, "max-attempts", 10, "handler attempts before a message is dead-lettered")
	fs.Uint64Var(&c.seed, "seed", 1, "seed of the injected faults")
	fs.DurationVar(&c.timeout, "timeout", 5*time.Minute, "give up (and count what is missing as lost) after this long")
	fs.BoolVar(&c.progress, "progress", true, "show a progress bar on stderr")
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	switch {
	case fs.NArg() > 0:
		return c, fmt.Errorf("unexpected arguments %q", fs.Args())
	case c.n <= 0 || c.producers <= 0 || c.workers <= 0 || c.prefetch <= 0 || c.maxAttempts <= 0:
		return c, errors.New("-n, -producers, -workers, -prefetch and -max-attempts must be positive")
	case c.failRate < 0 || c.panicRate < 0 || c.failRate+c.panicRate >= 1:
		return c, errors.New("-fail-rate and -panic-rate must be >= 0 with a sum below 1")
	case c.cuts < 0 || c.replays < 0 || c.restarts < 0 || c.replayN < 0:
		return c, errors.New("-cuts, -replays, -replay-size and -restarts must be >= 0")
	}
	if c.producers > c.n {
		c.producers = c.n
	}
	return c, nil
}

// runDemo runs the demo and returns the exit status: 0 when every message
// was applied exactly once, 1 when one was lost or applied twice or the
// demo failed, 2 for bad flags.
func runDemo(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	cfg, err := parseDemoFlags(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintln(stderr, "msgaudit demo:", err)
		return 2
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
// out; else 0.
func (r demoReport) exitCode() int {
	if r.lost > 0 || r.twice > 0 || r.timedOut {
		return 1
	}
	return 0
}

// demoReport is the demo's outcome.
type demoReport struct {
	mode, store                     string
	sent, deliveries, redeliveries  uint64
	dupAudit, dupStore, dupInFlight uint64
	retries, failures, panics       uint64
	deadLettered, cuts, replayed    uint64
	restarts, reconnects, ackLost   uint64
	applied, lost, twice            int64
	dlqDepth, leftOnBroker          int
	elapsed                         time.Duration
	storeMean                       time.Duration
	timedOut                        bool
}

func (r demoReport) print(w io.Writer) {
	fmt.Fprintf(w, "msgaudit demo on %s, store %s\n", r.mode, r.store)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	row := func(k string, v any, note string) {
		fmt.Fprintf(tw, "  %s\t%v\t%s\n", k, v, note)
	}
	row("sent", r.sent, "")
	row("delivered", r.deliveries, "deliveries handed to the consumer")
	row("redeliveries", r.redeliveries, "with the redelivered flag")
	row("duplicates absorbed", r.dupAudit+r.dupStore+r.dupInFlight,
		fmt.Sprintf("audit %d, store %d, in-flight %d", r.dupAudit, r.dupStore, r.dupInFlight))
	row("retries", r.retries, fmt.Sprintf("handler failures %d (panics %d)", r.failures, r.panics))
	row("dead-lettered", r.deadLettered, fmt.Sprintf("%d distinct messages in the dead-letter queue", r.dlqDepth))
	row("connection cuts", r.cuts, fmt.Sprintf("one per restart included; reconnects %d, acks lost with their connection %d",
		r.reconnects, r.ackLost))
	row("failover replays", r.replayed, "copies of already-delivered messages")
	row("consumer restarts", r.restarts, "from the persisted audit snapshot and the store")
	row("applied", r.applied, "ledger rows")
	row("left on the broker", r.leftOnBroker, "deliveries never acknowledged, at the end")
	row("lost", r.lost, "must be 0")
	row("applied twice", r.twice, "must be 0")
	row("elapsed", r.elapsed.Round(time.Millisecond), fmt.Sprintf("mean store call %v", r.storeMean.Round(time.Microsecond)))
	row("throughput", fmt.Sprintf("%.0f msgs/s", float64(r.sent)/math.Max(r.elapsed.Seconds(), 1e-9)), "")
	tw.Flush()
	switch {
	case r.timedOut:
		fmt.Fprintln(w, "FAIL: timed out before every message was accounted for")
	case r.lost == 0 && r.twice == 0 && r.dlqDepth > 0:
		fmt.Fprintf(w, "OK: nothing lost, nothing applied twice (%d messages dead-lettered after -max-attempts)\n", r.dlqDepth)
	case r.lost == 0 && r.twice == 0:
		fmt.Fprintln(w, "OK: every message applied exactly once")
	default:
		fmt.Fprintln(w, "FAIL: messages lost or applied twice")
	}
}

// demoRun holds the state shared by the producers, the consumer and the
// fault injector.
type demoRun struct {
	cfg     demoConfig
	dir     string
	ledger  *demoLedger
	store   idempotency.Store
	metrics *receiver.Metrics
	keys    []string        // every demo key sent
	dlq     map[string]bool // demo keys found in the dead-letter queue at the end
	sent    atomic.Uint64
	ackLost atomic.Uint64
	cuts    atomic.Uint64
	// finished is when every message was accounted for (the clock stops
	// there; shutdown and the final accounting are not throughput).
	finished time.Time
}

func demo(ctx context.Context, cfg demoConfig, stderr io.Writer) (demoReport, error) {
	dir, err := os.MkdirTemp("", "msgaudit-demo-")
	if err != nil {
		return demoReport{}, err
	}
	defer os.RemoveAll(dir)
	if cfg.queue == "" {
		cfg.queue = fmt.Sprintf("/queue/msgaudit.demo.%d", time.Now().UnixNano())
	}
	storeURL := cfg.store
	if storeURL == "" {
		// The store lives in a temp dir deleted at exit, so fsync on every
		// commit (the store's durable default) would buy nothing here.
		storeURL = "sqlite:" + filepath.Join(dir, "idempotency.db") + "?_pragma=synchronous(NORMAL)"
	}
	// Each run keys its store entries under its own queue name; a short
	// retention lets a shared Redis or PostgreSQL store forget them soon.
	store, err := idempotency.Open(ctx, storeURL, idempotency.Options{ClaimTTL: time.Minute, Retention: time.Hour})
	if err != nil {
		return demoReport{}, fmt.Errorf("store: %w", err)
	}
	defer store.Close()
	led, err := openDemoLedger(filepath.Join(dir, "ledger.db"))
	if err != nil {
		return demoReport{}, fmt.Errorf("ledger: %w", err)
	}
	defer led.close()

	d := &demoRun{cfg: cfg, dir: dir, ledger: led, store: store, metrics: new(receiver.Metrics)}
	for p := range cfg.producers {
		for i := p; i < cfg.n; i += cfg.producers {
			d.keys = append(d.keys, fmt.Sprintf("p%d-%d", p, i))
		}
	}
	rep := demoReport{store: idempotency.RedactURL(storeURL)}
	var bar *progressbar.ProgressBar
	if cfg.progress {
		bar = progressbar.NewOptions(cfg.n, progressbar.OptionSetWriter(stderr), progressbar.OptionSetDescription("applied or dead-lettered"),
			progressbar.OptionShowCount(), progressbar.OptionThrottle(100*time.Millisecond), progressbar.OptionSetWidth(30),
			progressbar.OptionShowIts(), progressbar.OptionSetItsString("msg"))
	}
	start := time.Now()
	if cfg.stomp == "" {
		err = d.runModel(ctx, &rep, bar)
	} else {
		err = d.runStomp(ctx, &rep, bar)
	}
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
	applied, err := led.count(ctx)
	if err != nil {
		return rep, err
	}
	inLedger, err := led.keys(ctx)
	if err != nil {
		return rep, err
	}
	s := d.metrics.Snapshot()
	rep.sent = d.sent.Load()
	rep.applied = applied
	rep.twice = led.twice.Load()
	rep.dupAudit, rep.dupStore, rep.dupInFlight = s.DuplicatesAudit, s.DuplicatesStore, s.DuplicatesInFlight
	rep.retries, rep.failures, rep.panics = s.Retries, s.HandlerErrors, s.Panics
	rep.deadLettered = s.DeadLettered
	rep.reconnects = s.Reconnects
	rep.ackLost = d.ackLost.Load()
	rep.cuts = d.cuts.Load()
	rep.storeMean = s.MeanStoreLatency()
	if rep.deliveries == 0 {
		rep.deliveries, rep.redeliveries = s.Delivered, s.Redelivered
	}
	// Lost: keys sent but neither in the ledger nor in the dead-letter
	// queue.
	for _, k := range d.keys {
		if !inLedger[k] && !d.dlq[k] {
			rep.lost++
		}
	}
	rep.dlqDepth = len(d.dlq)
	return rep, nil
}

// handler applies a message to the ledger, failing or panicking first as
// the seeded fault plan says for this (message, attempt).
func (d *demoRun) handler(ctx context.Context, m *receiver.Message) error {
	key := m.Headers[demoKeyHeader]
	if key == "" {
		return fmt.Errorf("message %s has no %s header", m.Key, demoKeyHeader)
	}
	switch r := d.draw(m.Key, m.Attempt); {
	case r < d.cfg.failRate:
		return fmt.Errorf("injected failure of %s, attempt %d", key, m.Attempt)
	case r < d.cfg.failRate+d.cfg.panicRate:
		panic(fmt.Sprintf("injected panic on %s, attempt %d", key, m.Attempt))
	}
	return d.ledger.apply(ctx, key, m.Key)
}

// draw returns a uniform number in [0,1) fixed by the seed, the message
// and the attempt, so a run's fault plan does not depend on scheduling.
func (d *demoRun) draw(id string, attempt int) float64 {
	h := fnv.New64a()
	h.Write([]byte(id))
	x := h.Sum64() ^ d.cfg.seed*0x9e3779b97f4a7c15 ^ uint64(attempt)*0xbf58476d1ce4e5b9
	// splitmix64's finalizer: FNV's high bits alone are far from uniform
	// for ids that differ only in their last digits.
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return float64(x>>11) / (1 << 53)
}

func (d *demoRun) newAudit(snapshot []byte) (*connaudit.Audit, error) {
	a, err := connaudit.New(connaudit.Options{})
	if err != nil {
		return nil, err
	}
	if snapshot != nil {
		if err := a.UnmarshalBinary(snapshot); err != nil {
			return nil, fmt.Errorf("restore audit snapshot: %w", err)
		}
	}
	return a, nil
}

func (d *demoRun) newReceiver(a *connaudit.Audit) (*receiver.Receiver, error) {
	return receiver.New(receiver.Config{
		Audit: receiver.ConnAudit(a), Store: d.store, Namespace: "msgaudit-demo" + d.cfg.queue,
		MaxAttempts: d.cfg.maxAttempts, Metrics: d.metrics,
		// Retry fast: the demo's failures are injected, not overload.
		Backoff: func(attempt int) time.Duration { return time.Duration(attempt) * time.Millisecond },
	})
}

// snapshotAudit persists the audit to a file and reads it back, as a
// consumer restart would.
func (d *demoRun) snapshotAudit(a *connaudit.Audit, n int) ([]byte, error) {
	b, err := a.MarshalBinary()
	if err != nil {
		return nil, err
	}
	path := filepath.Join(d.dir, fmt.Sprintf("audit-%d.snapshot", n))
	if err := os.WriteFile(path, b, 0o600); err != nil {
		return nil, err
	}
	return os.ReadFile(path)
}

// demoMilestones returns k fractions of the run spread over (lo, hi).
func demoMilestones(k int, lo, hi float64) []float64 {
	out := make([]float64, k)
	for i := range out {
		out[i] = lo + (hi-lo)*float64(i+1)/float64(k+1)
	}
	return out
}

// faultPlan is the ordered list of faults, each due when the applied count
// reaches its fraction of n.
type demoFault struct {
	at   float64
	kind string // "cut", "replay", "restart"
}

func (d *demoRun) plan() []demoFault {
	var fs []demoFault
	for _, at := range demoMilestones(d.cfg.cuts, 0.05, 0.9) {
		fs = append(fs, demoFault{at, "cut"})
	}
	if d.cfg.stomp == "" {
		for _, at := range demoMilestones(d.cfg.replays, 0.1, 0.95) {
			fs = append(fs, demoFault{at, "replay"})
		}
	}
	for _, at := range demoMilestones(d.cfg.restarts, 0.2, 0.8) {
		fs = append(fs, demoFault{at, "restart"})
	}
	// Sort by time (insertion sort: a handful of faults).
	for i := 1; i < len(fs); i++ {
		for j := i; j > 0 && fs[j].at < fs[j-1].at; j-- {
			fs[j], fs[j-1] = fs[j-1], fs[j]
		}
	}
	return fs
}

// demoConsumer is a running consumer the driver can stop.
type demoConsumer struct {
	audit *connaudit.Audit
	stop  func() // stops and waits
}

// drive runs the fault plan against the progress of the ledger until every
// key is accounted for (applied or dead-lettered) and settled() says the
// broker has nothing left, or the timeout passes.
func (d *demoRun) drive(ctx context.Context, rep *demoReport, bar *progressbar.ProgressBar,
	start func(snapshot []byte) (*demoConsumer, error), cut func(), replay func(), settled func() bool) error {
	ctx, cancel := context.WithTimeout(ctx, d.cfg.timeout)
	defer cancel()
	h, err := start(nil)
	if err != nil {
		return err
	}
	defer func() { h.stop() }()
	faults := d.plan()
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for {
		// Progress counts messages accounted for: applied or dead-lettered.
		done := d.ledger.applied.Load() + int64(d.metrics.DeadLettered.Load())
		if bar != nil {
			_ = bar.Set64(min(done, int64(d.cfg.n)))
		}
		for len(faults) > 0 && float64(done) >= faults[0].at*float64(d.cfg.n) {
			f := faults[0]
			faults = faults[1:]
			switch f.kind {
			case "cut":
				cut()
			case "replay":
				replay()
			case "restart":
				// Cut first, so acks of the deliveries still running are
				// lost and come back after the restart; then stop (running
				// handlers finish and settle), persist the audit, restart.
				cut()
				h.stop()
				snap, err := d.snapshotAudit(h.audit, int(rep.restarts))
				if err != nil {
					return err
				}
				rep.restarts++
				if h, err = start(snap); err != nil {
					return err
				}
			}
		}
		if done >= int64(d.cfg.n) && d.finished.IsZero() {
			d.finished = time.Now() // every message accounted for: the clock stops
		}
		if done >= int64(d.cfg.n) && settled() {
			return nil
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
	rep.mode = "the in-process broker MODEL (not a real broker; -stomp runs on ActiveMQ)"
	var cutNext atomic.Bool
	var b *brokermodel.Broker
	b = brokermodel.New(brokermodel.Options{OnReceive: func(c *brokermodel.Conn, _ *brokermodel.Delivery) {
		// A pending cut happens as a delivery reaches the handler: the
		// delivery runs, and its ack is lost with the connection.
		if cutNext.CompareAndSwap(true, false) && b.Cut(c) {
			d.cuts.Add(1)
		}
	}})
	defer b.Close()

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
			for i := p; i < d.cfg.n; i += d.cfg.producers {
				key := fmt.Sprintf("p%d-%d", p, i)
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

	start := func(snapshot []byte) (*demoConsumer, error) {
		a, err := d.newAudit(snapshot)
		if err != nil {
			return nil, err
		}
		rcv, err := d.newReceiver(a)
		if err != nil {
			return nil, err
		}
		mc := &demoModelConsumer{d: d, b: b, rcv: rcv}
		cctx, cancel := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() { defer close(done); mc.run(cctx) }()
		return &demoConsumer{audit: a, stop: sync.OnceFunc(func() { cancel(); <-done })}, nil
	}
	err := d.drive(ctx, rep, bar, start,
		func() { cutNext.Store(true) },
		func() { b.Replay(d.cfg.queue, d.cfg.replayN, true) },
		func() bool {
			select {
			case err := <-perr:
				_ = err
				return true // a producer failed: stop waiting for what it never sent
			default:
			}
			p, f := b.Depth(d.cfg.queue)
			return p == 0 && f == 0 && d.sent.Load() == uint64(d.cfg.n)
		})
	select {
	case e := <-perr:
		if err == nil {
			err = fmt.Errorf("producer: %w", e)
		}
	default:
	}
	st := b.Stats()
	rep.deliveries, rep.redeliveries, rep.replayed = st.Delivered, st.Redelivered, st.Replayed
	pending, inFlight := b.Depth(d.cfg.queue)
	rep.leftOnBroker = pending + inFlight
	d.dlq = map[string]bool{}
	for _, m := range b.Browse(brokermodel.DLQ) {
		d.dlq[m.Headers[demoKeyHeader]] = true
	}
	return err
}

// demoModelConsumer consumes the model's queue with a pool of workers on one
// connection, reconnecting when it is cut. Requeue is a local retry that
// holds the delivery (the model's NACK is a poison ack, as on ActiveMQ);
// DeadLetter is a transaction: SEND the copy to the DLQ + ACK the original.
type demoModelConsumer struct {
	d   *demoRun
	b   *brokermodel.Broker
	rcv *receiver.Receiver
}

func (c *demoModelConsumer) run(ctx context.Context) {
	for first := true; ctx.Err() == nil; first = false {
		if !first {
			c.d.metrics.Reconnects.Add(1)
		}
		conn, err := c.b.Connect()
		if err != nil {
			return
		}
		sub, err := conn.Subscribe(c.d.cfg.queue, c.d.cfg.prefetch)
		if err != nil {
			conn.Close()
			continue
		}
		var wg sync.WaitGroup
		for range c.d.cfg.workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					dl, err := sub.Receive(ctx)
					if err != nil {
						return
					}
					c.handle(ctx, conn, dl)
				}
			}()
		}
		wg.Wait()
		conn.Close() // graceful on stop: whatever is unacked comes back
	}
}

func (c *demoModelConsumer) handle(ctx context.Context, conn *brokermodel.Conn, dl *brokermodel.Delivery) {
	m := &receiver.Message{Key: dl.MessageID, Destination: dl.Destination, Consumer: "demo", Headers: dl.Headers,
		Body: dl.Body, Redelivered: dl.Redelivered, Timestamp: dl.Timestamp}
	// A stopping consumer lets the running delivery finish and settle.
	pctx := context.WithoutCancel(ctx)
	for {
		res := c.rcv.Process(pctx, m, c.d.handler)
		switch res.Action {
		case receiver.Ack:
			if err := conn.Ack(dl); err != nil {
				c.d.ackLost.Add(1)
			}
			return
		case receiver.DeadLetter:
			tx, err := conn.Begin()
			if err == nil {
				_, err = tx.Send(brokermodel.DLQ, dl.Body, brokermodel.SendOptions{Persistent: true,
					Headers: receiver.DeadLetterHeaders(m, res)})
			}
			if err == nil {
				err = tx.Ack(dl)
			}
			if err == nil {
				err = tx.Commit()
			}
			if err != nil {
				c.d.ackLost.Add(1)
			}
			return
		}
		// Requeue: retry locally after the backoff, unless the consumer
		// stops or the connection is gone (the broker redelivers then).
		if conn.Closed() {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(res.RetryAfter):
		}
		if res.Ran {
			m.Attempt = res.Attempt + 1
		}
	}
}

// ---- real ActiveMQ over STOMP ----

func (d *demoRun) runStomp(ctx context.Context, rep *demoReport, bar *progressbar.ProgressBar) error {
	addrs := strings.Split(d.cfg.stomp, ",")
	rep.mode = "ActiveMQ over STOMP at " + d.cfg.stomp
	// Consumers connect through a TCP proxy the demo can cut.
	var proxies []*tcpproxy.Proxy
	var consumerAddrs []string
	for _, a := range addrs {
		p, err := tcpproxy.New(strings.TrimSpace(a), tcpproxy.Options{})
		if err != nil {
			return err
		}
		defer p.Close()
		proxies = append(proxies, p)
		consumerAddrs = append(consumerAddrs, p.Addr())
	}
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
	start := func(snapshot []byte) (*demoConsumer, error) {
		a, err := d.newAudit(snapshot)
		if err != nil {
			return nil, err
		}
		rcv, err := d.newReceiver(a)
		if err != nil {
			return nil, err
		}
		c, err := stompconsumer.New(stompconsumer.Config{
			Addresses: consumerAddrs, Receiver: rcv, Metrics: d.metrics,
			Subscriptions: []stompconsumer.Subscription{{Destination: d.cfg.queue, Handler: d.handler}},
			Prefetch:      d.cfg.prefetch, Concurrency: d.cfg.workers, MaxAttempts: d.cfg.maxAttempts,
			RetryBackoff:          stompconsumer.Backoff{Initial: time.Millisecond, Max: 20 * time.Millisecond},
			DeadLetterDestination: d.dlqName(),
		})
		if err != nil {
			return nil, err
		}
		cctx, cancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- c.Run(cctx) }()
		return &demoConsumer{audit: a, stop: sync.OnceFunc(func() {
			cancel()
			err := <-done
			d.ackLost.Add(c.Stats().StaleAcks)
			if err != nil && !errors.Is(err, context.Canceled) {
				select {
				case perr <- fmt.Errorf("consumer: %w", err):
				default:
				}
			}
		})}, nil
	}
	err := d.drive(ctx, rep, bar, start,
		func() {
			for _, p := range proxies {
				d.cuts.Add(uint64(p.Cut()))
			}
		},
		func() {},
		d.quiet(time.Second))
	select {
	case e := <-perr:
		if err == nil {
			err = e
		}
	default:
	}
	if err == nil {
		d.dlq, err = demoDrainStomp(ctx, strings.TrimSpace(addrs[0]), d.dlqName())
	}
	if err == nil {
		var left map[string]bool
		left, err = demoDrainStomp(ctx, strings.TrimSpace(addrs[0]), d.cfg.queue)
		rep.leftOnBroker = len(left)
	}
	return err
}

// quiet returns a settled check for a broker whose queue depth the demo
// cannot read: everything was sent and no delivery reached the consumer
// for the period (the redeliveries of acks lost in cuts have come back and
// been absorbed).
func (d *demoRun) quiet(period time.Duration) func() bool {
	var last uint64
	var since time.Time
	return func() bool {
		n := d.metrics.Delivered.Load()
		if n != last || since.IsZero() {
			last, since = n, time.Now()
		}
		return d.sent.Load() == uint64(d.cfg.n) && time.Since(since) >= period
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
	for i := p; i < d.cfg.n; i += d.cfg.producers {
		key := fmt.Sprintf("p%d-%d", p, i)
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

// ---- the ledger ----

// demoLedger is an SQLite table with a UNIQUE key: applying a message twice
// fails the constraint, which the demo counts as "applied twice".
type demoLedger struct {
	db      *sql.DB
	ins     *sql.Stmt
	applied atomic.Int64
	twice   atomic.Int64
}

func openDemoLedger(path string) (*demoLedger, error) {
	db, err := sql.Open("sqlite", "file:"+path+"?_pragma=journal_mode(WAL)&_pragma=synchronous(NORMAL)&_pragma=busy_timeout(10000)")
	if err != nil {
		return nil, err
	}
	db.SetMaxOpenConns(1) // one writer; Go queues the others instead of SQLite busy-waiting
	if _, err := db.Exec(`CREATE TABLE IF NOT EXISTS ledger (
		key TEXT NOT NULL UNIQUE, message_id TEXT NOT NULL, applied_at INTEGER NOT NULL)`); err != nil {
		db.Close()
		return nil, err
	}
	ins, err := db.Prepare(`INSERT INTO ledger (key, message_id, applied_at) VALUES (?, ?, ?)`)
	if err != nil {
		db.Close()
		return nil, err
	}
	return &demoLedger{db: db, ins: ins}, nil
}

// apply records key's effect. A second application is counted (and not
// returned as an error: the effect already happened, retrying cannot undo
// it).
func (l *demoLedger) apply(ctx context.Context, key, id string) error {
	_, err := l.ins.ExecContext(ctx, key, id, time.Now().UnixNano())
	if err != nil {
		if strings.Contains(err.Error(), "UNIQUE constraint failed") {
			l.twice.Add(1)
			return nil
		}
		return err
	}
	l.applied.Add(1)
	return nil
}

func (l *demoLedger) count(ctx context.Context) (int64, error) {
	var n int64
	err := l.db.QueryRowContext(ctx, `SELECT COUNT(*) FROM ledger`).Scan(&n)
	return n, err
}

func (l *demoLedger) keys(ctx context.Context) (map[string]bool, error) {
	rows, err := l.db.QueryContext(ctx, `SELECT key FROM ledger`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[string]bool{}
	for rows.Next() {
		var k string
		if err := rows.Scan(&k); err != nil {
			return nil, err
		}
		out[k] = true
	}
	return out, rows.Err()
}

func (l *demoLedger) close() {
	l.ins.Close()
	l.db.Close()
}
