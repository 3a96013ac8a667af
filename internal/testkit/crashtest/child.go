//go:build unix

package crashtest

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/acemq/msgaudit/connaudit"
	"github.com/acemq/msgaudit/idempotency"
	"github.com/acemq/msgaudit/idempotency/pgstore"
	_ "github.com/acemq/msgaudit/idempotency/redisstore" // registers its URL schemes with idempotency.Open
	"github.com/acemq/msgaudit/idempotency/sqlitestore"
	"github.com/acemq/msgaudit/natsconsumer"
	"github.com/acemq/msgaudit/rabbitconsumer"
	"github.com/acemq/msgaudit/receiver"
	"github.com/acemq/msgaudit/stompconsumer"
)

// KeyHeader is the header carrying each message's application key
// ("crash-<run>:<n>", a shape the connection audit can parse).
const KeyHeader = "app-key"

// childSnapshot is what a child writes to its metrics file.
type childSnapshot struct {
	Metrics  receiver.Snapshot
	Calls    int64  // handler calls
	Connects uint64 // successful broker connections
}

// RunChild is the body of a crash-test child process: it reads its Config
// from the environment, consumes the queue until SIGTERM (or until it is
// killed) and returns when the consumer has stopped. A crash-test
// package's TestMain calls it when IsChild reports true.
func RunChild() error {
	cfg, idx, err := childConfig()
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))

	g, err := openGauges(cfg.gaugePath(idx), false)
	if err != nil {
		return err
	}
	defer g.close()
	// Each running delivery holds a connection for its inbox transaction.
	db, err := openDB(cfg.DB, cfg.DSN, cfg.Concurrency+1)
	if err != nil {
		return err
	}
	defer db.Close()
	led := newLedger(db, cfg.DB, cfg.Ledger)

	metrics := new(receiver.Metrics)
	a, err := connaudit.New(connaudit.Options{})
	if err != nil {
		return err
	}
	// The consumers are configured as an application would (Pipeline),
	// with the inbox or the store wrapped to hold their settlement open.
	pipeline := receiver.Config{
		Audit:   receiver.ConnAudit(a),
		KeyFunc: receiver.HeaderKey(KeyHeader),
		Backoff: receiver.Backoff{Initial: 20 * time.Millisecond, Max: 500 * time.Millisecond},
		Metrics: metrics,
		Logger:  log,
	}
	var handler receiver.Handler
	if cfg.Store == StoreInbox || cfg.Store == StorePgxInbox {
		ib, h, closeInbox, err := inboxTier(ctx, cfg, db, led, g, metrics)
		if err != nil {
			return err
		}
		defer closeInbox()
		pipeline.Inbox, handler = ib, h
	} else {
		st, h, closeStore, err := storeTier(ctx, cfg, db, led, g)
		if err != nil {
			return err
		}
		defer closeStore()
		handler = h
		if st != nil {
			pipeline.Store, pipeline.Namespace = st, cfg.Queue
		} else {
			pipeline.MemoryOnly = true
		}
	}

	var (
		run      func(context.Context) error
		connects func() uint64
	)
	switch cfg.Transport {
	case STOMP:
		c, err := stompconsumer.New(stompconsumer.Config{
			Addresses:             []string{cfg.Addr},
			Subscriptions:         []stompconsumer.Subscription{{Destination: cfg.Queue, Handler: handler}},
			Prefetch:              cfg.Prefetch,
			Concurrency:           cfg.Concurrency,
			ShutdownTimeout:       5 * time.Second,
			DeadLetterDestination: cfg.DeadLetter,
			CopySecret:            []byte("crashtest copy secret, shared by every child"), // copies outlive a kill
			Pipeline:              pipeline,
			KeyHeader:             KeyHeader,
		})
		if err != nil {
			return err
		}
		run, connects = c.Run, func() uint64 { return c.Stats().Connects }
	case AMQP:
		c, err := rabbitconsumer.New(rabbitconsumer.Config{
			URL:             cfg.Addr,
			Queue:           cfg.Queue,
			Handler:         handler,
			Prefetch:        cfg.Prefetch,
			Concurrency:     cfg.Concurrency,
			ShutdownTimeout: 5 * time.Second,
			DeadLetterQueue: cfg.DeadLetter,
			Pipeline:        pipeline,
			KeyHeader:       KeyHeader,
		})
		if err != nil {
			return err
		}
		run, connects = c.Run, func() uint64 { return c.Stats().Connects }
	case NATS:
		c, err := natsconsumer.New(natsconsumer.Config{
			URL:               cfg.Addr,
			Stream:            cfg.Queue,
			Consumer:          "crash",
			DeadLetterSubject: cfg.DeadLetter,
			Handler:           handler,
			Concurrency:       cfg.Concurrency,
			// A killed child's deliveries come back after AckWait: the
			// shortest one keeps the run short.
			AckWait:         time.Second,
			ShutdownTimeout: 5 * time.Second,
			Pipeline:        pipeline,
		})
		if err != nil {
			return err
		}
		run, connects = c.Run, func() uint64 { return c.Stats().Connects }
	default:
		return fmt.Errorf("crashtest: unknown transport %q", cfg.Transport)
	}

	snap := func() childSnapshot {
		return childSnapshot{Metrics: metrics.Snapshot(), Calls: g.load(gaugeCalls), Connects: connects()}
	}
	done := make(chan struct{})
	defer close(done)
	go writeMetrics(cfg.metricsPath(idx), snap, done)
	defer snapshotTo(cfg.metricsPath(idx), snap)
	return run(ctx)
}

// sleep sleeps d (a kill window held open).
func sleep(d time.Duration) {
	if d > 0 {
		time.Sleep(d)
	}
}

// storeTier builds the external store of cfg.Store (nil for none) as the
// pipeline's durable tier and the handler that applies the effect in its
// own transaction. The handler sleeps cfg.EffectDelay after the effect
// committed (before the store confirms); the store is wrapped so that it
// sleeps cfg.AckDelay after its confirm, before the acknowledgement.
func storeTier(ctx context.Context, cfg Config, db *sql.DB, led *ledger, g *gauges) (idempotency.Store, receiver.Handler, func(), error) {
	var slow *slowStore
	handler := func(ctx context.Context, m *receiver.Message) error {
		g.add(gaugeCalls, 1)
		var end func()
		if slow != nil {
			end = slow.markEffect(m.IdempotencyKey())
		} else {
			end = markEffect(ctx, g)
		}
		defer end()
		if err := led.record(ctx, db, m.IdempotencyKey()); err != nil {
			return err
		}
		sleep(cfg.EffectDelay)
		return nil
	}
	opts := idempotency.Options{ClaimTTL: cfg.ClaimTTL}
	var st idempotency.Store
	var err error
	switch cfg.Store {
	case StoreNone:
		return nil, handler, func() {}, nil
	case StoreSQLite:
		st, err = sqlitestore.Open(ctx, cfg.StoreAt, sqlitestore.Options{Options: opts})
	case StorePostgres:
		st, err = pgstore.Open(ctx, withParam(cfg.DSN, "msgaudit_table", cfg.StoreAt), pgstore.Options{Options: opts})
	case StoreRedis:
		// Through idempotency.Open, so any URL scheme redisstore
		// registers works: a single server or a Redis Cluster.
		st, err = idempotency.Open(ctx, withParam(cfg.StoreURL, "msgaudit_prefix", cfg.StoreAt), opts)
	default:
		err = fmt.Errorf("crashtest: unknown store %q", cfg.Store)
	}
	if err != nil {
		return nil, nil, nil, err
	}
	slow = &slowStore{Store: st, g: g, delay: cfg.AckDelay}
	return slow, handler, func() { st.Close() }, nil
}

// slowStore wraps an external store as slowSettle wraps the inbox: it
// keeps the effect window of a delivery open from its handler's effect
// until the store confirmed or released its claim, and after a confirm it
// sleeps delay, counted in gaugeSettled, before the receiver goes on to
// the acknowledgement. Deliveries are told apart by their key (one per
// message in a run).
type slowStore struct {
	idempotency.Store
	g      *gauges
	delay  time.Duration
	phases sync.Map // key ID → *phase, from the claim to its settlement
}

// TryClaim claims k and opens its phase.
func (s *slowStore) TryClaim(ctx context.Context, k idempotency.Key) (idempotency.Outcome, idempotency.Claim, error) {
	out, c, err := s.Store.TryClaim(ctx, k)
	if err == nil && out == idempotency.Claimed {
		s.phases.Store(k.ID, new(phase))
	}
	return out, c, err
}

// markEffect counts the delivery of key in gaugeEffect as its handler
// starts writing the effect; the window ends at its claim's settlement.
func (s *slowStore) markEffect(key string) (end func()) {
	s.g.add(gaugeEffect, 1)
	if v, ok := s.phases.Load(key); ok {
		v.(*phase).effect.Store(true)
		return func() {}
	}
	return func() { s.g.add(gaugeEffect, -1) }
}

// settled closes the phase of c's key.
func (s *slowStore) settled(c idempotency.Claim) {
	if v, ok := s.phases.LoadAndDelete(c.Key.ID); ok && v.(*phase).effect.Load() {
		s.g.add(gaugeEffect, -1)
	}
}

// Confirm confirms c, closes its phase and sleeps delay.
func (s *slowStore) Confirm(ctx context.Context, c idempotency.Claim) error {
	err := s.Store.Confirm(ctx, c)
	s.settled(c)
	if err == nil {
		s.g.add(gaugeSettled, 1)
		sleep(s.delay)
		s.g.add(gaugeSettled, -1)
	}
	return err
}

// Release releases c and closes its phase.
func (s *slowStore) Release(ctx context.Context, c idempotency.Claim) error {
	err := s.Store.Release(ctx, c)
	s.settled(c)
	return err
}

// withParam appends a query parameter to a URL.
func withParam(u, name, value string) string {
	sep := "?"
	if strings.Contains(u, "?") {
		sep = "&"
	}
	return u + sep + name + "=" + value
}

// slowSettle wraps the durable selector (the
// inbox). It keeps the effect window of a delivery open until the
// inbox committed (see markEffect), and after a
// Completed settlement it sleeps delay, counted in gaugeSettled, before
// the receiver goes on to the acknowledgement.
type slowSettle struct {
	receiver.Selector
	g     *gauges
	delay time.Duration
}

// Select asks the wrapped selector and wraps an Accept's Context and
// Settle.
func (s slowSettle) Select(ctx context.Context, m *receiver.Message) (receiver.Decision, error) {
	d, err := s.Selector.Select(ctx, m)
	if err != nil || d.Verdict != receiver.Accept {
		return d, err
	}
	ph := new(phase)
	innerCtx, innerSettle := d.Context, d.Settle
	d.Context = func(c context.Context) context.Context {
		if innerCtx != nil {
			c = innerCtx(c)
		}
		return context.WithValue(c, phaseKey{}, ph)
	}
	d.Settle = func(ctx context.Context, st receiver.Settlement) error {
		var err error
		if innerSettle != nil {
			err = innerSettle(ctx, st)
		}
		if ph.effect.Load() {
			s.g.add(gaugeEffect, -1)
		}
		if err == nil && st == receiver.Completed {
			s.g.add(gaugeSettled, 1)
			sleep(s.delay)
			s.g.add(gaugeSettled, -1)
		}
		return err
	}
	return d, nil
}

// phase tells a delivery's settlement that its handler wrote the effect.
type phase struct{ effect atomic.Bool }

type phaseKey struct{}

// markEffect counts the delivery in gaugeEffect as its handler starts
// writing the effect (a write whose reply a kill prevents may still
// commit). Behind a durable selector the window stays open until the
// settlement (commit or confirm); without one it ends when the returned
// function is called, as the handler returns.
func markEffect(ctx context.Context, g *gauges) (end func()) {
	g.add(gaugeEffect, 1)
	if ph, ok := ctx.Value(phaseKey{}).(*phase); ok {
		ph.effect.Store(true)
		return func() {}
	}
	return func() { g.add(gaugeEffect, -1) }
}

// writeMetrics writes the metrics snapshot to path every 100 ms until
// done is closed.
func writeMetrics(path string, snap func() childSnapshot, done <-chan struct{}) {
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-done:
			return
		case <-t.C:
			snapshotTo(path, snap)
		}
	}
}

// snapshotTo replaces the file at path with snap() (a rename, so a
// reader never sees half a file).
func snapshotTo(path string, snap func() childSnapshot) {
	b, err := json.Marshal(snap())
	if err != nil {
		return
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return
	}
	_ = os.Rename(tmp, path)
}

// readSnapshot reads a child's last metrics snapshot; a missing file is a
// zero snapshot (the child died before it wrote one).
func readSnapshot(path string) (childSnapshot, error) {
	var s childSnapshot
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return s, nil
	}
	if err != nil {
		return s, err
	}
	return s, json.Unmarshal(b, &s)
}
