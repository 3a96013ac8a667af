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
	"sync/atomic"
	"syscall"
	"time"

	"github.com/acemq/msgaudit/connaudit"
	"github.com/acemq/msgaudit/idempotency"
	"github.com/acemq/msgaudit/idempotency/pgstore"
	_ "github.com/acemq/msgaudit/idempotency/redisstore" // registers its URL schemes with idempotency.Open
	"github.com/acemq/msgaudit/idempotency/sqlitestore"
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
	audit := receiver.ConnAudit(a, receiver.ConnAuditMetrics(metrics))
	// With the inbox the consumers are configured as an application
	// would (Config.Inbox); the external stores need a prebuilt receiver,
	// so that their selector can be wrapped.
	var (
		ib      receiver.Selector
		rcv     *receiver.Receiver
		handler receiver.Handler
	)
	if cfg.Store == StoreInbox || cfg.Store == StorePgxInbox {
		ibh, h, closeInbox, err := inboxTier(ctx, cfg, db, led, g, metrics)
		if err != nil {
			return err
		}
		defer closeInbox()
		ib, handler = ibh, h
	} else {
		sels, h, closeStore, err := storeTier(ctx, cfg, db, led, g)
		if err != nil {
			return err
		}
		defer closeStore()
		handler = h
		key := receiver.HeaderKey(KeyHeader)
		if cfg.Transport == STOMP {
			key = stompconsumer.CarriedKey(key)
		}
		rcv, err = receiver.New(receiver.Config{
			Audit:     audit,
			Selectors: sels,
			KeyFunc:   key,
			Backoff:   retryBackoff,
			Metrics:   metrics,
			Logger:    log,
		})
		if err != nil {
			return err
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
			RetryBackoff:          stompconsumer.Backoff{Initial: 20 * time.Millisecond, Max: 500 * time.Millisecond},
			ShutdownTimeout:       5 * time.Second,
			DeadLetterDestination: cfg.DeadLetter,
			Receiver:              rcv,
			Inbox:                 ib,
			Audit:                 audit,
			KeyHeader:             KeyHeader,
			Metrics:               metrics,
			Logger:                log,
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
			Backoff:         retryBackoff,
			MaxRequeueDelay: 500 * time.Millisecond,
			ShutdownTimeout: 5 * time.Second,
			DeadLetterQueue: cfg.DeadLetter,
			Receiver:        rcv,
			Inbox:           ib,
			Audit:           audit,
			KeyHeader:       KeyHeader,
			Metrics:         metrics,
			Logger:          log,
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

// retryBackoff spaces the retries of a delivery: short, so that a run
// does not wait long for hand-backs.
func retryBackoff(attempt int) time.Duration {
	return min(20*time.Millisecond<<attempt, 500*time.Millisecond)
}

// sleep sleeps d (a kill window held open).
func sleep(d time.Duration) {
	if d > 0 {
		time.Sleep(d)
	}
}

// storeTier builds the external store of cfg.Store (or none) as the
// receiver's durable selector and the handler that applies the effect in
// its own transaction. The handler sleeps cfg.EffectDelay after the
// effect committed (before the store confirms); the store's selector is
// wrapped so that it sleeps cfg.AckDelay after its confirm, before the
// acknowledgement.
func storeTier(ctx context.Context, cfg Config, db *sql.DB, led *ledger, g *gauges) ([]receiver.Selector, receiver.Handler, func(), error) {
	handler := func(ctx context.Context, m *receiver.Message) error {
		g.add(gaugeCalls, 1)
		end := markEffect(ctx, g)
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
		st, err = sqlitestore.Open(ctx, cfg.StoreAt, opts)
	case StorePostgres:
		st, err = pgstore.Open(ctx, withParam(cfg.DSN, "msgaudit_table", cfg.StoreAt), opts)
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
	sel, err := receiver.NewStoreSelector(st, receiver.StoreOptions{Namespace: cfg.Queue})
	if err != nil {
		st.Close()
		return nil, nil, nil, err
	}
	return []receiver.Selector{slowSettle{sel, g, cfg.AckDelay}}, handler, func() { st.Close() }, nil
}

// withParam appends a query parameter to a URL.
func withParam(u, name, value string) string {
	sep := "?"
	if strings.Contains(u, "?") {
		sep = "&"
	}
	return u + sep + name + "=" + value
}

// slowSettle wraps the durable selector (an external store's or the
// inbox). It keeps the effect window of a delivery open until the store
// confirmed or the inbox committed (see markEffect), and after a
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
