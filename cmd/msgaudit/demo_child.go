package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/acemq/msgaudit/connaudit"
	"github.com/acemq/msgaudit/idempotency"
	"github.com/acemq/msgaudit/internal/copyhdr"
	"github.com/acemq/msgaudit/natsconsumer"
	"github.com/acemq/msgaudit/receiver"
	"github.com/acemq/msgaudit/stompconsumer"
)

// demoChildEnv names the environment variable that turns a msgaudit process
// into a demo consumer child: its value is the path of the child's
// configuration (a demoChildConfig in JSON), written by the parent.
const demoChildEnv = "MSGAUDIT_DEMO_CHILD"

// The duplicate guards the demo can run its consumer with.
const (
	guardInbox = "inbox" // audit + transactional inbox in the ledger's database
	guardStore = "store" // audit + external idempotency store, the ledger apart
	guardNone  = "none"  // nothing: every delivery is applied
)

// demoChildConfig is what the parent tells a consumer child.
type demoChildConfig struct {
	Guard       string
	Queue       string
	BrokerSock  string   // the broker model's socket (model runs)
	Stomp       []string // STOMP addresses (-stomp runs: the parent's cuttable proxies)
	NATS        string   // NATS URL (-nats runs: the parent's cuttable proxy)
	DLQ         string   // STOMP dead-letter destination, NATS dead-letter subject
	ControlSock string
	DB          string // the ledger's SQLite file (and the inbox's)
	Store       string // idempotency store URL (-guard store)
	Namespace   string
	SnapshotIn  string // audit snapshot to start from ("" = empty audit)
	SnapshotOut string // where a graceful stop persists the audit
	Workers     int
	Prefetch    int
	MaxAttempts int
	FailRate    float64
	PanicRate   float64
	Seed        uint64
	// LoseKey is a test hook: the delivery of this demo key is
	// acknowledged without being applied, a lost message.
	LoseKey string
	// Role is the process's part in a -chain run: chainA, chainRelay or
	// chainB; "" for the demo's one consumer.
	Role string
	// QueueOut is where consumer A sends (-chain).
	QueueOut string
	// DupKey and GhostKey are -chain test hooks: the relay publishes the
	// message of demo key DupKey twice, the second time under a new
	// outbox id; consumer A sends the message of GhostKey outside the
	// delivery's transaction and fails the delivery.
	DupKey, GhostKey string
	// Unordered is a -chain test hook: consumer B does not keep its
	// deliveries of one order key in order, and starts consuming a second
	// late, as after an outage, so that a backlog waits for its workers.
	Unordered bool
}

// runDemoChild runs a consumer child and returns its exit status.
func runDemoChild(ctx context.Context, path string, stderr io.Writer) int {
	if err := demoChild(ctx, path); err != nil {
		var re chainRoleError
		if errors.As(err, &re) {
			fmt.Fprintf(stderr, "msgaudit demo: %s process: %v\n", re.name, re.err)
			return 1
		}
		fmt.Fprintln(stderr, "msgaudit demo: consumer process:", err)
		return 1
	}
	return 0
}

// chainRoleError is the error of a -chain child, with the name of its
// role.
type chainRoleError struct {
	name string
	err  error
}

func (e chainRoleError) Error() string { return e.name + ": " + e.err.Error() }

func demoChild(ctx context.Context, path string) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	var cfg demoChildConfig
	if err := json.Unmarshal(b, &cfg); err != nil {
		return fmt.Errorf("configuration %s: %w", path, err)
	}
	err = demoChildRun(ctx, cfg)
	if err != nil && cfg.Role != "" {
		err = chainRoleError{chainRoleName(cfg.Role), err}
	}
	return err
}

// demoConsumer is the state of one consumer child.
type demoConsumer struct {
	cfg     demoChildConfig
	ledger  *demoLedger
	metrics *receiver.Metrics
	audit   *connaudit.Audit   // nil with -guard none
	rcv     *receiver.Receiver // the model broker's pipeline
	rc      receiver.Config    // the pipeline's configuration
	handler receiver.Handler
	stomp   atomic.Pointer[stompconsumer.Consumer]
	ackLost atomic.Uint64
	again   atomic.Uint64
	closers []func()
}

func demoChildRun(ctx context.Context, cfg demoChildConfig) error {
	var dialer net.Dialer
	nc, err := dialer.DialContext(ctx, "unix", cfg.ControlSock)
	if err != nil {
		return err
	}
	ctrl := newWireConn(nc)
	defer ctrl.Close()
	c := &demoConsumer{cfg: cfg, metrics: new(receiver.Metrics)}
	defer func() {
		for i := len(c.closers) - 1; i >= 0; i-- {
			c.closers[i]()
		}
	}()
	if err := c.setup(ctx); err != nil {
		return err
	}

	stop := make(chan struct{})
	parentGone := make(chan struct{})
	go func() {
		defer close(parentGone)
		for once := false; ; {
			f, err := ctrl.recv()
			if err != nil {
				return
			}
			if f.Op == "stop" && !once {
				once = true
				close(stop)
			}
		}
	}()
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		switch {
		case cfg.Role == chainRelay:
			done <- c.relay(cctx)
		case cfg.Stomp != nil:
			done <- c.consumeStomp(cctx)
		case cfg.NATS != "":
			done <- c.consumeNATS(cctx)
		default:
			done <- c.consumeModel(cctx)
		}
	}()
	report := func() error {
		st := c.stats()
		return ctrl.send(&wireFrame{Op: "stats", Stats: &st})
	}
	tick := time.NewTicker(demoStatsEvery)
	defer tick.Stop()
	for {
		select {
		case <-tick.C:
			if err := report(); err != nil {
				return fmt.Errorf("the parent process is gone: %w", err)
			}
		case <-stop:
			// Graceful: running handlers finish and settle, the audit is
			// persisted, the last counters are reported.
			cancel()
			err := <-done
			if err == nil && c.audit != nil && cfg.SnapshotOut != "" {
				err = c.saveAudit()
			}
			if rerr := report(); err == nil {
				err = rerr
			}
			return err
		case <-parentGone:
			return errors.New("the parent process is gone")
		case err := <-done:
			_ = report()
			if ctx.Err() != nil {
				return nil // interrupted (the terminal's ^C reaches the whole process group)
			}
			if err == nil {
				err = errors.New("stopped by itself")
			}
			return fmt.Errorf("consumer: %w", err)
		}
	}
}

// setup opens the ledger and builds the duplicate pipeline of the guard.
func (c *demoConsumer) setup(ctx context.Context) error {
	led, err := openDemoLedger(c.cfg.DB)
	if err != nil {
		return fmt.Errorf("ledger: %w", err)
	}
	c.ledger = led
	c.closers = append(c.closers, led.close)
	if c.cfg.Role == chainRelay {
		return nil // the relay reads consumer A's outbox; no pipeline
	}
	rc := receiver.Config{
		Namespace: c.cfg.Namespace, MaxAttempts: c.cfg.MaxAttempts, Metrics: c.metrics,
		// Retry fast: the demo's failures are injected, not overload.
		Backoff: receiver.Backoff{Initial: time.Millisecond, Max: 20 * time.Millisecond},
	}
	// Consumer B keys its deliveries on their outbox ids, not on the
	// broker's producer sequences the connection audit tracks.
	if c.cfg.Guard != guardNone && c.cfg.Role != chainB {
		if c.audit, err = connaudit.New(connaudit.Options{}); err != nil {
			return err
		}
		if c.cfg.SnapshotIn != "" {
			b, err := os.ReadFile(c.cfg.SnapshotIn)
			if err != nil {
				return err
			}
			if err := c.audit.UnmarshalBinary(b); err != nil {
				return fmt.Errorf("restore audit snapshot: %w", err)
			}
		}
		rc.Audit = receiver.ConnAudit(c.audit)
	}
	switch c.cfg.Guard {
	case guardInbox:
		setup := c.setupInbox
		switch c.cfg.Role {
		case chainA:
			setup = c.setupChainA
		case chainB:
			setup = c.setupChainB
		}
		if err := setup(ctx, &rc); err != nil {
			return err
		}
	case guardStore:
		// A short claim lease: a killed consumer's claims block the
		// redeliveries of its messages until they expire.
		st, err := idempotency.Open(ctx, c.cfg.Store, idempotency.Options{ClaimTTL: 2 * time.Second, Retention: time.Hour})
		if err != nil {
			return fmt.Errorf("idempotency store: %w", err)
		}
		c.closers = append(c.closers, func() { st.Close() })
		rc.Store = st
		c.handler = func(ctx context.Context, m *receiver.Message) error {
			key, err := c.fault(m)
			if err != nil || key == "" {
				return err
			}
			return c.ledger.apply(ctx, nil, key, m.Key)
		}
	case guardNone:
		// No audit, no store, no inbox. The receiver still keeps its
		// in-memory table of keys, but hands every duplicate it knows to
		// the handler, which applies it again.
		rc.Duplicates, rc.MemoryOnly = receiver.DuplicateDeliver, true
		c.handler = func(ctx context.Context, m *receiver.Message) error {
			key, err := c.fault(m)
			if err != nil || key == "" {
				return err
			}
			if m.Duplicate {
				c.again.Add(1)
			}
			return c.ledger.apply(ctx, nil, key, m.Key)
		}
	default:
		return fmt.Errorf("unknown guard %q", c.cfg.Guard)
	}
	c.rc = rc
	if c.cfg.Stomp != nil || c.cfg.NATS != "" {
		return nil // stompconsumer or natsconsumer builds the pipeline from c.rc
	}
	c.rcv, err = receiver.New(rc)
	return err
}

// fault returns the demo key of m, after failing or panicking as the seeded
// fault plan says for this (message, attempt). An empty key and a nil error
// mean: acknowledge without applying (the LoseKey test hook).
func (c *demoConsumer) fault(m *receiver.Message) (string, error) {
	key := m.Headers[demoKeyHeader]
	if key == "" {
		return "", fmt.Errorf("message %s has no %s header", m.Key, demoKeyHeader)
	}
	switch r := demoDraw(c.cfg.Seed, m.IdempotencyKey(), m.Attempt); {
	case r < c.cfg.FailRate:
		return "", fmt.Errorf("injected failure of %s, attempt %d", key, m.Attempt)
	case r < c.cfg.FailRate+c.cfg.PanicRate:
		panic(fmt.Sprintf("injected panic on %s, attempt %d", key, m.Attempt))
	}
	if key == c.cfg.LoseKey {
		return "", nil
	}
	return key, nil
}

// demoDraw returns a uniform number in [0,1) fixed by the seed, the message
// and the attempt, so a run's fault plan does not depend on scheduling.
func demoDraw(seed uint64, id string, attempt int) float64 {
	h := fnv.New64a()
	h.Write([]byte(id))
	x := h.Sum64() ^ seed*0x9e3779b97f4a7c15 ^ uint64(attempt)*0xbf58476d1ce4e5b9
	// splitmix64's finalizer: FNV's high bits alone are far from uniform
	// for ids that differ only in their last digits.
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return float64(x>>11) / (1 << 53)
}

// saveAudit persists the audit for the next consumer.
func (c *demoConsumer) saveAudit() error {
	b, err := c.audit.MarshalBinary()
	if err != nil {
		return err
	}
	tmp := c.cfg.SnapshotOut + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, c.cfg.SnapshotOut)
}

// stats returns the consumer's counters so far.
func (c *demoConsumer) stats() demoStats {
	s := c.metrics.Snapshot()
	st := demoStats{
		Delivered: s.Delivered, Redelivered: s.Redelivered,
		DupAudit: s.DuplicatesAudit, DupStore: s.DuplicatesStore, DupInFlight: s.DuplicatesInFlight, DupOther: s.DuplicatesOther,
		Retries: s.Retries, Failures: s.HandlerErrors, Panics: s.Panics, DeadLettered: s.DeadLettered,
		Reconnects: s.Reconnects, AckLost: c.ackLost.Load(), StoreCalls: s.StoreCalls, StoreNanos: uint64(s.StoreLatency),
		AppliedAgain: c.again.Load(),
	}
	if sc := c.stomp.Load(); sc != nil {
		st.AckLost += sc.Stats().StaleAcks
	}
	return st
}

// consumeModel consumes the parent's broker model with a pool of workers on
// one connection, reconnecting when it is cut. Requeue is a local retry that
// holds the delivery (the model's NACK is a poison ack, as on ActiveMQ);
// DeadLetter is a transaction: the copy to the DLQ + the ack of the
// original.
func (c *demoConsumer) consumeModel(ctx context.Context) error {
	if c.cfg.Unordered {
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(time.Second):
		}
	}
	for first := true; ctx.Err() == nil; first = false {
		if !first {
			c.metrics.Reconnects.Add(1)
		}
		mc, err := dialModel(ctx, c.cfg.BrokerSock, c.cfg.Queue, c.cfg.Prefetch)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("broker model: %w", err)
		}
		if c.cfg.Role == chainB && !c.cfg.Unordered {
			c.consumeOrdered(ctx, mc)
			mc.Close()
			continue
		}
		var wg sync.WaitGroup
		for range c.cfg.Workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for ctx.Err() == nil {
					select {
					case <-ctx.Done():
					case f, ok := <-mc.frames:
						if !ok {
							return
						}
						if ctx.Err() == nil {
							c.handleModel(ctx, mc, f)
						}
					}
				}
			}()
		}
		wg.Wait()
		mc.Close() // on stop: whatever is unacked comes back
	}
	return nil
}

func (c *demoConsumer) handleModel(ctx context.Context, mc *modelClient, f *wireFrame) {
	m := &receiver.Message{Key: f.ID, Destination: f.Dest, Consumer: "demo", Headers: f.Headers,
		Body: f.Body, Redelivered: f.Redelivered, Timestamp: time.Unix(0, f.Timestamp)}
	// A stopping consumer lets the running delivery finish and settle.
	pctx := context.WithoutCancel(ctx)
	for {
		res := c.rcv.Process(pctx, m, c.handler)
		switch res.Action {
		case receiver.Ack:
			if mc.ack(f.Tag) != nil {
				c.ackLost.Add(1)
			}
			return
		case receiver.DeadLetter:
			if mc.deadLetter(f.Tag, copyhdr.DeadLetter(m.Headers, m.IdempotencyKey(), res.Reason, res.Attempt), f.Body) != nil {
				c.ackLost.Add(1)
			}
			return
		}
		// Requeue: retry locally after the backoff, unless the consumer
		// stops or the connection is gone (the broker redelivers then). A
		// delivery deferred without running (its key claimed elsewhere)
		// waits longer: the claim has to end first.
		wait := res.RetryAfter
		if !res.Ran {
			wait = max(wait, 20*time.Millisecond)
		}
		select {
		case <-ctx.Done():
			return
		case <-mc.done:
			return
		case <-time.After(wait):
		}
		if res.Ran {
			m.Attempt = res.Attempt + 1
		}
	}
}

// consumeStomp consumes the queue on ActiveMQ with stompconsumer.
func (c *demoConsumer) consumeStomp(ctx context.Context) error {
	sc, err := stompconsumer.New(stompconsumer.Config{
		Addresses: c.cfg.Stomp, Pipeline: c.rc,
		Subscriptions: []stompconsumer.Subscription{{Destination: c.cfg.Queue, Handler: c.handler}},
		Prefetch:      c.cfg.Prefetch, Concurrency: c.cfg.Workers,
		DeadLetterDestination: c.cfg.DLQ,
		CopySecret:            []byte("msgaudit demo copy secret, shared by its children"), // copies outlive a kill
	})
	if err != nil {
		return err
	}
	c.stomp.Store(sc)
	err = sc.Run(ctx)
	if errors.Is(err, context.Canceled) {
		return nil
	}
	return err
}

// consumeNATS consumes the demo's stream on NATS JetStream with
// natsconsumer.
func (c *demoConsumer) consumeNATS(ctx context.Context) error {
	nc, err := natsconsumer.New(natsconsumer.Config{
		URL: c.cfg.NATS, Stream: demoStreamName(c.cfg.Queue), Consumer: "msgaudit-demo",
		DeadLetterSubject: c.cfg.DLQ, Handler: c.handler, Pipeline: c.rc,
		Concurrency: c.cfg.Workers, InFlight: max(c.cfg.Workers, min(c.cfg.Prefetch, 4*c.cfg.Workers)),
		// A killed consumer's deliveries come back after AckWait.
		AckWait: 2 * time.Second,
	})
	if err != nil {
		return err
	}
	err = nc.Run(ctx)
	if errors.Is(err, context.Canceled) {
		return nil
	}
	return err
}
