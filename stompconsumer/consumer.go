package stompconsumer

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/acemq/msgaudit/idempotency"
	"github.com/acemq/msgaudit/internal/nilcheck"
	"github.com/acemq/msgaudit/internal/redact"
	"github.com/acemq/msgaudit/receiver"
	"github.com/go-stomp/stomp/v3"
	"github.com/go-stomp/stomp/v3/frame"
)

// Consumer consumes STOMP subscriptions through the duplicate pipeline of
// package receiver. Create it with New and start it with Run.
type Consumer struct {
	cfg     Config
	dial    *dialer
	rcv     *receiver.Receiver
	metrics *receiver.Metrics
	log     *slog.Logger
	red     redact.Redactor
	subs    []Subscription
	gates   []*receiver.Gate // per subscription: its Concurrency, over every session
	running atomic.Bool
	gen     atomic.Uint64
	st      stats

	guaranteeOnce sync.Once
}

// stats are the transport's own counters (the receiver counts the rest).
type stats struct {
	connects, reconnects, connectErrors       atomic.Uint64
	retriesSent, deadLettersSent, oversized   atomic.Uint64
	dropped, ackErrors, staleAcks, localRetry atomic.Uint64
}

// Stats is a snapshot of the transport counters. The duplicate pipeline's
// counters (delivered, processed, duplicates by reason, handler errors,
// store latency) are in Consumer.Metrics.
type Stats struct {
	// Connects counts successful connections (the first one included);
	// Reconnects those after a connection loss; ConnectErrors failed
	// attempts.
	Connects, Reconnects, ConnectErrors uint64
	// RetriesSent counts retry copies committed with the original's ACK;
	// LocalRetries counts retries run in place (topics).
	RetriesSent, LocalRetries uint64
	// DeadLettersSent counts dead-letter copies committed with the
	// original's ACK.
	DeadLettersSent uint64
	// Oversized counts frames cut for exceeding MaxHeaderBytes or
	// MaxBodyBytes; a record of each (without its body) is dead-lettered
	// and counted in DeadLettersSent as well. A persistent one is then
	// NACKed, so the broker dead-letters it in full; a non-persistent one
	// is ACKed with its record.
	Oversized uint64
	// Dropped counts received deliveries never processed because their
	// connection was lost or the consumer stopped; the broker sends them
	// again.
	Dropped uint64
	// StaleAcks counts acknowledgements not sent because the delivery's
	// connection had been lost (its ack id is meaningless on any other).
	StaleAcks uint64
	// AckErrors counts ACK/transaction failures (each ends the connection).
	AckErrors uint64
	// Generation is the number of the current (or last) connection.
	Generation uint64
}

// New validates cfg and returns a Consumer. It does not connect.
func New(cfg Config) (*Consumer, error) {
	if len(cfg.Addresses) == 0 {
		return nil, fmt.Errorf("%w: no Addresses", ErrConfig)
	}
	if len(cfg.Subscriptions) == 0 {
		return nil, fmt.Errorf("%w: no Subscriptions", ErrConfig)
	}
	eps := make([]endpoint, len(cfg.Addresses))
	for i, a := range cfg.Addresses {
		ep, err := parseAddress(a)
		if err != nil {
			return nil, err
		}
		eps[i] = ep
	}
	tc, err := cfg.tlsConfig()
	if err != nil {
		return nil, err
	}
	if cfg.Prefetch <= 0 {
		cfg.Prefetch = DefaultPrefetch
	}
	if cfg.Concurrency <= 0 {
		cfg.Concurrency = DefaultConcurrency
	}
	if cfg.ConnectRetries == 0 {
		cfg.ConnectRetries = DefaultConnectRetries
	}
	if cfg.ConnectTimeout <= 0 {
		cfg.ConnectTimeout = DefaultConnectTimeout
	}
	if cfg.HeartBeat == 0 {
		cfg.HeartBeat = DefaultHeartBeat
	}
	if cfg.ShutdownTimeout <= 0 {
		cfg.ShutdownTimeout = DefaultShutdownTimeout
	}
	if cfg.MaxHeaderBytes <= 0 {
		cfg.MaxHeaderBytes = DefaultMaxHeaderBytes
	}
	if cfg.MaxBodyBytes <= 0 {
		cfg.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if cfg.DeadLetterDestination == "" {
		cfg.DeadLetterDestination = DefaultDeadLetter
	}
	if cfg.KeyHeader == "" {
		cfg.KeyHeader = frame.MessageId
	}
	cfg.RetryBackoff = cfg.RetryBackoff.withDefaults(100*time.Millisecond, 5*time.Second, 0.2)
	cfg.ReconnectBackoff = cfg.ReconnectBackoff.withDefaults(100*time.Millisecond, 10*time.Second, 0.5)

	red := redact.New(cfg.Passcode).With(redact.URLSecrets(cfg.Addresses...)...)
	for _, ep := range eps {
		red = red.With(ep.passcode)
	}
	log := cfg.Logger
	if log == nil {
		log = nopLogger()
	}
	log = slog.New(redact.NewHandler(log.Handler(), red))

	subs := make([]Subscription, len(cfg.Subscriptions))
	names := make(map[string]bool)
	for i, s := range cfg.Subscriptions {
		if s.Destination == "" || s.Destination[0] != '/' {
			return nil, fmt.Errorf("%w: subscription %d: destination %q must start with /queue/, /topic/, /temp-queue/ or /temp-topic/", ErrConfig, i, s.Destination)
		}
		if s.Handler == nil {
			return nil, fmt.Errorf("%w: subscription %d (%s): nil Handler", ErrConfig, i, s.Destination)
		}
		if s.Name == "" {
			s.Name = s.Destination
		}
		if names[s.Name] {
			return nil, fmt.Errorf("%w: two subscriptions named %q (set Subscription.Name)", ErrConfig, s.Name)
		}
		names[s.Name] = true
		if s.Concurrency <= 0 {
			s.Concurrency = cfg.Concurrency
		}
		if s.Prefetch <= 0 {
			s.Prefetch = cfg.Prefetch
		}
		if s.InFlight == 0 {
			s.InFlight = cfg.InFlight
		}
		inFlight, err := inFlight(s.InFlight, s.Concurrency, s.Prefetch)
		if err != nil {
			return nil, fmt.Errorf("%w: subscription %d (%s): %w", ErrConfig, i, s.Destination, err)
		}
		s.InFlight = inFlight
		subs[i] = s
	}

	if cfg.Inbox != nil {
		// The lanes are sized to the handlers of every subscription
		// together, but a subscription that holds more deliveries in the
		// pipeline than it runs handlers could take more lanes than it has
		// handlers: the lanes must not outnumber its Concurrency.
		total, bound := 0, 0
		for _, s := range subs {
			total += s.Concurrency
			if pipelined(s) > s.Concurrency && (bound == 0 || s.Concurrency < bound) {
				bound = s.Concurrency
			}
		}
		if err := checkInbox(cfg, total, bound); err != nil {
			return nil, err
		}
	}

	c := &Consumer{cfg: cfg, log: log, red: red, subs: subs}
	handlers := 0
	for _, s := range subs {
		c.gates = append(c.gates, receiver.NewGate(s.Concurrency))
		handlers += s.Concurrency
	}
	c.dial = &dialer{endpoints: eps, tls: tc, login: cfg.Login, passcode: cfg.Passcode, vhost: cfg.VirtualHost,
		clientID: cfg.ClientID, heartBeat: cfg.HeartBeat, timeout: cfg.ConnectTimeout,
		maxHeader: cfg.MaxHeaderBytes, maxBody: cfg.MaxBodyBytes, keep: []string{cfg.KeyHeader}, log: log, red: red}

	if cfg.Receiver != nil {
		c.rcv = cfg.Receiver
	} else {
		if err := checkStore(cfg.Store, cfg.Inbox != nil, cfg.MemoryOnly); err != nil {
			return nil, err
		}
		audit := cfg.Audit
		if audit == nil {
			if audit, err = defaultAudit(); err != nil {
				return nil, err
			}
		}
		var kf receiver.KeyFunc
		if cfg.KeyFunc != nil {
			kf = CarriedKey(cfg.KeyFunc)
		}
		var selectors []receiver.Selector
		if cfg.Inbox != nil {
			selectors = []receiver.Selector{cfg.Inbox}
		}
		c.rcv, err = receiver.New(receiver.Config{
			Audit:       audit,
			Store:       cfg.Store,
			Selectors:   selectors,
			Namespace:   cfg.Namespace,
			KeyFunc:     kf,
			MissingKey:  cfg.MissingKey,
			Duplicates:  cfg.DuplicatePolicy,
			OnDuplicate: cfg.OnDuplicate,
			MaxAttempts: cfg.MaxAttempts,
			Handlers:    handlers,
			Backoff:     func(attempt int) time.Duration { return cfg.RetryBackoff.Delay(attempt - 1) },
			Metrics:     cfg.Metrics,
			Logger:      log,
		})
		if err != nil {
			return nil, err
		}
	}
	c.metrics = c.rcv.Metrics()
	return c, nil
}

// inFlight returns the pipeline depth of a subscription: n when set and
// within [concurrency, max(prefetch, concurrency)], else the default.
func inFlight(n, concurrency, prefetch int) (int, error) {
	switch {
	case n < 0:
		return 0, fmt.Errorf("negative InFlight %d", n)
	case n == 0 && concurrency == 1:
		return 1, nil
	case n == 0:
		return max(prefetch, concurrency), nil
	case n < concurrency:
		return 0, fmt.Errorf("InFlight %d below Concurrency %d: a handler slot could never be used", n, concurrency)
	case n > max(prefetch, concurrency):
		return 0, fmt.Errorf("InFlight %d above Prefetch %d: the broker never has more than Prefetch messages out", n, prefetch)
	}
	return n, nil
}

// checkStore makes durability an explicit choice: a usable store, or
// MemoryOnly.
func checkStore(store idempotency.Store, inbox, memoryOnly bool) error {
	switch {
	case inbox && memoryOnly:
		return fmt.Errorf("%w: both Inbox and MemoryOnly set", ErrConfig)
	case inbox:
		return nil // checkInbox has checked it, and that Store is not set too
	case store == nil && !memoryOnly:
		return fmt.Errorf("%w: no Store or Inbox: set Inbox to a transactional inbox (package inbox) so that a message whose effect is in a database is never applied twice, Store to an idempotency store (idempotency.Open) to recognise finished work across restarts and consumers, or MemoryOnly: true to detect duplicates within this process only", ErrConfig)
	case store != nil && nilcheck.IsNil(store):
		return fmt.Errorf("%w: Store is a nil %T (was an error from opening it ignored?)", ErrConfig, store)
	case store != nil && memoryOnly:
		return fmt.Errorf("%w: both Store and MemoryOnly set", ErrConfig)
	}
	return nil
}

// logGuarantee says once, at the first Run, what the duplicate detection
// survives.
func (c *Consumer) logGuarantee() {
	c.guaranteeOnce.Do(func() {
		switch {
		case c.cfg.Receiver != nil:
		case c.cfg.Inbox != nil:
			c.log.Info("stompconsumer: transactional inbox: each delivery's key commits in the handler's own transaction, so a crash between effect and acknowledgement never applies a message twice",
				"inbox", fmt.Sprintf("%T", c.cfg.Inbox))
		case c.cfg.MemoryOnly:
			c.log.Warn("stompconsumer: memory-only duplicate detection (Config.MemoryOnly): duplicates are absorbed while this process runs, across reconnects; after a restart, or on another consumer, a redelivery of finished work is applied again")
		default:
			c.log.Info("stompconsumer: durable duplicate detection: finished work is recognised across restarts and by every consumer sharing the store; a crash between the handler's effect and the store's confirm can apply a message again once its claim lapses",
				"store", fmt.Sprintf("%T", c.cfg.Store))
		}
	})
}

// CarriedKey wraps a key function so that a copy this package resent (a
// retry or a dead letter) is keyed by the key it carries in
// receiver.HeaderOriginalKey, and every other delivery by f.
func CarriedKey(f receiver.KeyFunc) receiver.KeyFunc {
	return func(m *receiver.Message) (string, error) {
		if k := m.Headers[receiver.HeaderOriginalKey]; k != "" {
			return k, nil
		}
		return f(m)
	}
}

// Receiver returns the duplicate pipeline the consumer runs.
func (c *Consumer) Receiver() *receiver.Receiver { return c.rcv }

// Metrics returns the pipeline's counters (expose them to Prometheus with
// promexport.Receiver(c.Metrics().Snapshot, "stomp"), and the transport's
// with promexport.STOMP(c.Stats)).
func (c *Consumer) Metrics() *receiver.Metrics { return c.metrics }

// Stats returns a snapshot of the transport counters.
func (c *Consumer) Stats() Stats {
	return Stats{
		Connects: c.st.connects.Load(), Reconnects: c.st.reconnects.Load(), ConnectErrors: c.st.connectErrors.Load(),
		RetriesSent: c.st.retriesSent.Load(), LocalRetries: c.st.localRetry.Load(),
		DeadLettersSent: c.st.deadLettersSent.Load(), Oversized: c.st.oversized.Load(),
		Dropped: c.st.dropped.Load(), StaleAcks: c.st.staleAcks.Load(), AckErrors: c.st.ackErrors.Load(),
		Generation: c.gen.Load(),
	}
}

// Run connects, subscribes and consumes until ctx is cancelled, then stops
// gracefully and returns nil: it stops dispatching, lets in-flight
// handlers finish (for at most ShutdownTimeout, after which their context
// is cancelled), acknowledges them and disconnects.
// Deliveries received but not started are not acknowledged; the broker
// sends them again.
//
// A lost connection is not an error: Run reconnects to the next address
// with ReconnectBackoff and resubscribes. Run returns an error wrapping
// ErrConnect when no broker answers within ConnectRetries attempts at
// start, ErrRejected when a broker refuses the CONNECT (credentials) and
// ErrTLS when a certificate fails verification; those two are never
// retried. A Consumer runs once at a time (ErrRunning).
func (c *Consumer) Run(ctx context.Context) error {
	if !c.running.CompareAndSwap(false, true) {
		return ErrRunning
	}
	defer c.running.Store(false)
	c.logGuarantee()

	// Handlers outlive ctx by up to ShutdownTimeout.
	hctx, hcancel := context.WithCancel(context.WithoutCancel(ctx))
	defer hcancel()
	stopGrace := context.AfterFunc(ctx, func() {
		t := time.AfterFunc(c.cfg.ShutdownTimeout, hcancel)
		context.AfterFunc(hctx, func() { t.Stop() })
	})
	defer stopGrace()

	var old sync.WaitGroup // workers of lost connections still finishing
	defer old.Wait()

	cn, idx, err := c.connect(ctx, 0, c.cfg.ConnectRetries, false)
	if err != nil {
		if ctx.Err() != nil && !errors.Is(err, ErrRejected) && !errors.Is(err, ErrTLS) {
			return nil
		}
		return err
	}
	short := 0 // consecutive sessions that broke at once
	for {
		s := c.newSession(cn, hctx)
		lost := s.run(ctx)
		if lost == nil {
			return nil
		}
		old.Add(1)
		go func() { defer old.Done(); s.finish() }()
		c.log.Warn("stompconsumer: connection lost; reconnecting", "address", cn.ep.String(),
			"generation", s.gen, "received", s.recvd.Load(), "err", lost)
		// A connection that breaks right after it was made and delivered
		// nothing (a SUBSCRIBE the broker refuses with an ERROR frame, a
		// broker that accepts and drops) would otherwise be retried in a
		// tight loop: back off across such sessions.
		if time.Since(s.start) < shortSession && s.recvd.Load() == 0 {
			short++
			if !sleep(ctx, c.cfg.ReconnectBackoff.Delay(short-1)) {
				return nil
			}
		} else {
			short = 0
		}
		cn, idx, err = c.connect(ctx, idx+1, -1, true)
		if err != nil {
			if ctx.Err() != nil && !errors.Is(err, ErrRejected) && !errors.Is(err, ErrTLS) {
				return nil
			}
			return err
		}
	}
}

// shortSession is how long a connection must last (or deliver something)
// for the next reconnect not to back off.
const shortSession = 2 * time.Second

// connect tries the endpoints in rotation from index start; retries < 0
// means until ctx is done. Between rounds over the address list it waits
// ReconnectBackoff. Permanent errors (rejected CONNECT, certificate) end
// the loop at once.
func (c *Consumer) connect(ctx context.Context, start, retries int, reconnect bool) (*conn, int, error) {
	eps := c.dial.endpoints
	var last error
	for attempt := 0; ; attempt++ {
		if err := ctx.Err(); err != nil {
			if last == nil {
				last = err
			}
			return nil, 0, fmt.Errorf("%w: cancelled: %w", ErrConnect, last)
		}
		i := (start + attempt) % len(eps)
		cn, err := c.dial.dial(ctx, eps[i])
		if err == nil {
			c.st.connects.Add(1)
			if reconnect {
				c.st.reconnects.Add(1)
				c.metrics.Reconnects.Add(1)
			}
			c.log.Info("stompconsumer: connected", "address", eps[i].String(), "session", cn.stomp.Session(),
				"server", cn.stomp.Server(), "reconnect", reconnect)
			return cn, i, nil
		}
		c.st.connectErrors.Add(1)
		last = err
		if permanent(err) {
			c.log.Error("stompconsumer: connection refused for good; not retrying", "address", eps[i].String(), "err", err)
			return nil, 0, err
		}
		c.log.Warn("stompconsumer: connect failed", "address", eps[i].String(), "attempt", attempt+1, "err", err)
		if retries >= 0 && attempt >= retries {
			addrs := make([]string, len(eps))
			for j, ep := range eps {
				addrs[j] = ep.String()
			}
			return nil, 0, fmt.Errorf("%w after %d attempts to %v: %w", ErrConnect, attempt+1, addrs, err)
		}
		if (attempt+1)%len(eps) == 0 {
			sleep(ctx, c.cfg.ReconnectBackoff.Delay((attempt+1)/len(eps)-1))
		}
	}
}

// delivery is one MESSAGE received on one connection.
type delivery struct {
	msg *stomp.Message
	cut string // why the limiter cut the frame, "" if it did not
}

// session is one connection and its subscriptions (one generation).
type session struct {
	c     *Consumer
	gen   uint64
	cn    *conn
	hctx  context.Context // handlers' context (outlives Run's ctx by ShutdownTimeout)
	mu    sync.Mutex      // guards subs against fail running while run subscribes
	subs  []*subRun
	start time.Time
	recvd atomic.Uint64 // deliveries received
	lost  chan struct{} // closed when the connection is lost
	stop  chan struct{} // closed when a graceful stop begins
	quit  chan struct{} // closed when either happens: deliveries claimed ahead are abandoned
	quitO sync.Once
	once  sync.Once
	err   error
	dead  atomic.Bool
	wk    sync.WaitGroup // workers
	rd    sync.WaitGroup // readers
	stopO sync.Once
}

// subRun is one subscription on one session.
type subRun struct {
	s     *session
	cfg   Subscription
	sub   *stomp.Subscription
	q     *fifo
	topic bool
	ctx   context.Context // the handlers' context, with the subscription's gate and the session's quit
}

func (c *Consumer) newSession(cn *conn, hctx context.Context) *session {
	return &session{c: c, gen: c.gen.Add(1), cn: cn, hctx: hctx, start: time.Now(),
		lost: make(chan struct{}), stop: make(chan struct{}), quit: make(chan struct{})}
}

// halt closes quit (once).
func (s *session) halt() { s.quitO.Do(func() { close(s.quit) }) }

// run subscribes and consumes until ctx is done (graceful stop, returns
// nil) or the connection is lost (returns why).
func (s *session) run(ctx context.Context) error {
	for i, cfg := range s.c.subs {
		opts := []func(*frame.Frame) error{
			stomp.SubscribeOpt.Id("msgaudit-" + strconv.Itoa(i)),
			stomp.SubscribeOpt.Header("activemq.prefetchSize", strconv.Itoa(cfg.Prefetch)),
		}
		if cfg.Selector != "" {
			opts = append(opts, stomp.SubscribeOpt.Header("selector", cfg.Selector))
		}
		for k, v := range cfg.Headers {
			opts = append(opts, stomp.SubscribeOpt.Header(k, v))
		}
		sub, err := s.cn.stomp.Subscribe(cfg.Destination, stomp.AckClientIndividual, opts...)
		if err != nil {
			s.fail(fmt.Errorf("subscribe %s: %w", cfg.Destination, err))
			break
		}
		sr := &subRun{s: s, cfg: cfg, sub: sub, q: newFIFO(), topic: isTopic(cfg.Destination),
			ctx: receiver.WithAdmission(s.hctx, s.c.gates[i], s.quit)}
		s.mu.Lock()
		if s.dead.Load() {
			sr.q.close() // lost meanwhile: the workers exit at once
		}
		s.subs = append(s.subs, sr)
		s.mu.Unlock()
		s.rd.Add(1)
		go sr.read()
		// InFlight deliveries go through the pipeline at once; the gate
		// lets Concurrency of them run their handlers.
		for range cfg.InFlight {
			s.wk.Add(1)
			go sr.work()
		}
	}
	select {
	case <-s.lost:
		return s.err
	case <-ctx.Done():
	}
	s.shutdown()
	return nil
}

// fail marks the connection lost (once): queued deliveries are dropped,
// the socket is closed, workers finish what they run without acknowledging.
func (s *session) fail(err error) {
	s.once.Do(func() {
		s.err = s.c.red.Error(fmt.Errorf("%w: %w", ErrConnectionLost, err))
		s.mu.Lock()
		s.dead.Store(true)
		for _, sr := range s.subs {
			s.c.st.dropped.Add(uint64(sr.q.close()))
		}
		s.mu.Unlock()
		close(s.lost)
		s.halt()
		_ = s.cn.stomp.MustDisconnect()
		_ = s.cn.net.Close()
	})
}

// finish waits for a lost session's workers (their handlers complete and
// settle with the pipeline; nothing is acknowledged) and, briefly, its
// readers.
func (s *session) finish() {
	s.wk.Wait()
	waitTimeout(&s.rd, readerWait)
}

// readerWait bounds the wait for a subscription reader to see its channel
// closed. go-stomp v3.1.3 can leave a subscription channel open when its
// connection's loop is stuck delivering a late RECEIPT nobody waits for;
// such a reader holds nothing (its queue is closed) and is abandoned.
const readerWait = 5 * time.Second

func waitTimeout(wg *sync.WaitGroup, d time.Duration) bool {
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-done:
		return true
	case <-t.C:
		return false
	}
}

// shutdown is the graceful stop: stop dispatching, wait for in-flight
// handlers (and their ACKs), disconnect.
func (s *session) shutdown() {
	s.stopO.Do(func() { close(s.stop) })
	s.halt()
	s.mu.Lock()
	for _, sr := range s.subs {
		s.c.st.dropped.Add(uint64(sr.q.close()))
	}
	s.mu.Unlock()
	s.wk.Wait()
	if !s.dead.Load() {
		// No UNSUBSCRIBE first: ActiveMQ silently ignores an ACK sent after
		// UNSUBSCRIBE, so it could only come after the in-flight
		// deliveries were settled (above), where DISCONNECT ends the
		// subscriptions just the same. (go-stomp v3.1.3's Unsubscribe can
		// also miss its receipt's wake-up and stall for its timeout.) The
		// DISCONNECT receipt confirms that the broker processed every ACK
		// and transaction sent before it.
		if err := s.cn.stomp.Disconnect(); err != nil {
			s.c.log.Warn("stompconsumer: disconnect failed", "err", s.c.red.Error(err))
		}
	}
	s.dead.Store(true)
	_ = s.cn.net.Close()
	waitTimeout(&s.rd, readerWait)
	s.c.log.Info("stompconsumer: stopped", "generation", s.gen)
}

// read moves deliveries from go-stomp to the queue, never blocking.
func (sr *subRun) read() {
	s := sr.s
	defer s.rd.Done()
	for m := range sr.sub.C {
		if m.Err != nil {
			select {
			case <-s.stop:
			default:
				s.fail(m.Err)
			}
			continue
		}
		s.recvd.Add(1)
		d := &delivery{msg: m}
		if ack := m.Header.Get(frame.Ack); ack != "" {
			d.cut, _ = s.cn.lim.takeCut(ack)
		}
		if !sr.q.push(d) {
			s.c.st.dropped.Add(1)
		}
	}
	// The channel closes with the connection.
	select {
	case <-s.stop:
	default:
		s.fail(errors.New("subscription closed"))
	}
}

// work runs deliveries through the pipeline, one at a time.
func (sr *subRun) work() {
	defer sr.s.wk.Done()
	for {
		d, ok := sr.q.pop()
		if !ok {
			return
		}
		sr.handle(d)
	}
}

// handle processes one delivery and settles it with the broker.
func (sr *subRun) handle(d *delivery) {
	s, c := sr.s, sr.s.c
	if s.dead.Load() {
		c.st.dropped.Add(1)
		return
	}
	m := c.message(sr, d)
	if d.cut != "" {
		s.deadLetterCut(d, m)
		return
	}
	for {
		res := c.rcv.Process(sr.ctx, m, sr.cfg.Handler)
		if res.Action == receiver.Requeue && !res.Ran && errors.Is(res.Err, receiver.ErrAbandoned) {
			// Claimed ahead of a handler, never started: the connection
			// was lost or a graceful stop began meanwhile. The pipeline
			// has rolled it back; unacknowledged, the broker sends it
			// again.
			c.st.dropped.Add(1)
			return
		}
		switch res.Action {
		case receiver.Ack:
			_ = s.settle(d, func() error { return d.msg.Conn.Ack(d.msg) })
			return
		case receiver.DeadLetter:
			s.deadLetter(d, m, res)
			return
		default: // Requeue (and anything unknown: never acknowledge the unknown)
			delay := res.RetryAfter
			if !res.Ran {
				// Outcome unknown (in flight elsewhere, store down): back
				// off by the hand-backs so far, so an outage is not a hot
				// loop of copies.
				n, _ := strconv.Atoi(m.Headers[HeaderRequeues])
				delay = max(delay, c.cfg.RetryBackoff.Delay(n))
			}
			s.wait(delay)
			if s.dead.Load() {
				// Its connection is gone: nothing can be sent for it; the
				// broker sends it again.
				c.st.staleAcks.Add(1)
				return
			}
			if sr.topic {
				// A copy sent to a topic would reach every subscriber:
				// retry in place instead.
				select {
				case <-s.stop:
					return // not acknowledged: see Run
				default:
				}
				c.st.localRetry.Add(1)
				continue
			}
			s.requeue(d, m, res)
			return
		}
	}
}

// wait sleeps d unless the session stops or is lost first; it reports
// whether the full delay elapsed.
func (s *session) wait(d time.Duration) bool {
	if d <= 0 {
		return true
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-s.stop:
	case <-s.lost:
	}
	return false
}

// settle sends an acknowledgement-like frame for d unless d's connection is
// gone; a failure ends the connection (everything unacknowledged comes
// back), so a delivery can never stay unacknowledged on a live connection.
func (s *session) settle(d *delivery, send func() error) error {
	if s.dead.Load() {
		s.c.st.staleAcks.Add(1)
		return nil
	}
	if err := send(); err != nil {
		s.c.st.ackErrors.Add(1)
		s.fail(fmt.Errorf("acknowledge: %w", err))
		return err
	}
	return nil
}

// requeue sends a retry copy of d to its destination and acknowledges d in
// one transaction.
func (s *session) requeue(d *delivery, m *receiver.Message, res receiver.Result) {
	h := copyHeaders(d.msg.Header)
	h[receiver.HeaderOriginalKey] = m.IdempotencyKey()
	attempts := res.Attempt // the attempts made, this one included
	if !res.Ran {
		attempts-- // deferred without running: not an attempt
		n, _ := strconv.Atoi(h[HeaderRequeues])
		h[HeaderRequeues] = strconv.Itoa(n + 1)
	}
	h[receiver.HeaderAttempts] = strconv.Itoa(max(attempts, 0))
	h[HeaderRetryReason] = res.Reason
	if s.resend(d, m.Destination, h) {
		s.c.st.retriesSent.Add(1)
	}
}

// deadLetter sends a copy of d with the reason to the dead-letter
// destination and acknowledges d in one transaction.
func (s *session) deadLetter(d *delivery, m *receiver.Message, res receiver.Result) {
	h := copyHeaders(d.msg.Header)
	if k := m.IdempotencyKey(); k != "" {
		h[receiver.HeaderOriginalKey] = k
	}
	h[receiver.HeaderDeadLetterReason] = truncate(res.Reason, 1024)
	h[receiver.HeaderAttempts] = strconv.Itoa(res.Attempt)
	h[HeaderOriginalDestination] = m.Destination
	if s.resend(d, s.c.cfg.DeadLetterDestination, h) {
		s.c.st.deadLettersSent.Add(1)
	}
}

// deadLetterCut dead-letters a delivery the limiter cut. A record of it
// (the headers the limiter kept, the original's message id, an empty body
// marked with HeaderBodyOmitted, the reason) goes to the dead-letter
// destination, and the original is settled:
//
//   - persistent (the broker's persistent:true header): the record is
//     committed first (confirmed by its receipt), then the original is
//     NACKed, which ActiveMQ takes as a poison ack and answers by moving
//     the full message to its dead-letter queue; the record says so with
//     HeaderOriginalNacked. The two cannot share a transaction: ActiveMQ
//     refuses a transacted poison ack ("Poison ack cannot be transacted")
//     and closes the connection. If the NACK is lost (the connection or
//     the process ends in between), the original comes back and is cut
//     again: a second record, never a lost message.
//   - non-persistent or unknown: the record and the ACK of the original
//     in one transaction, because ActiveMQ discards a non-persistent
//     message on a NACK; the record is all that is left of it.
//
// It is logged without a body (the consumer never held it).
func (s *session) deadLetterCut(d *delivery, m *receiver.Message) {
	c := s.c
	c.st.oversized.Add(1)
	persistent := d.msg.Header.Get("persistent") == "true"
	what := "dead-lettering a record of it and ACKing it: its body is lost"
	if persistent {
		what = "dead-lettering a record of it, then NACKing it: the broker dead-letters it in full"
	}
	msgID := d.msg.Header.Get(frame.MessageId)
	c.log.Warn("stompconsumer: frame over the size limits; "+what,
		"destination", m.Destination, "message-id", msgID,
		"persistent", persistent, "reason", d.cut, "dead-letter", c.cfg.DeadLetterDestination)
	h := copyHeaders(d.msg.Header)
	if k := m.Key; k != "" {
		h[receiver.HeaderOriginalKey] = k
	}
	h[receiver.HeaderDeadLetterReason] = truncate(d.cut, 1024)
	h[receiver.HeaderAttempts] = "0"
	h[HeaderOriginalDestination] = m.Destination
	h[HeaderBodyOmitted] = "true"
	if msgID != "" {
		h[HeaderOriginalMessageID] = msgID
	}
	if !persistent {
		if s.resend(d, c.cfg.DeadLetterDestination, h) {
			c.st.deadLettersSent.Add(1)
		}
		return
	}
	h[HeaderOriginalNacked] = "true"
	if !s.commitCopy(d, c.cfg.DeadLetterDestination, h, false) {
		return // not confirmed: the original comes back
	}
	c.st.deadLettersSent.Add(1)
	_ = s.settle(d, func() error { return d.msg.Conn.Nack(d.msg) })
}

// resend commits, in one STOMP transaction, a persistent copy of d's body
// with headers h to dest and the ACK of d. Either both happen or neither:
// exactly one live instance of the message exists at every moment. If the
// outcome is unknown (the connection broke before the receipt), both
// outcomes keep that: committed (copy queued, original gone) or not
// (original redelivered, no copy). It reports whether the commit was
// confirmed.
func (s *session) resend(d *delivery, dest string, h map[string]string) bool {
	return s.commitCopy(d, dest, h, true)
}

// commitCopy commits a persistent copy of d's body with headers h to dest
// in one STOMP transaction, with the ACK of d if ack is set, and reports
// whether the commit was confirmed by its receipt. A failure ends the
// connection.
func (s *session) commitCopy(d *delivery, dest string, h map[string]string, ack bool) bool {
	if s.dead.Load() {
		s.c.st.staleAcks.Add(1)
		return false
	}
	opts := make([]func(*frame.Frame) error, 0, len(h)+2)
	for k, v := range h {
		opts = append(opts, stomp.SendOpt.Header(k, v))
	}
	opts = append(opts, stomp.SendOpt.Header("persistent", "true"))
	if _, ok := d.msg.Header.Contains(frame.ContentLength); !ok && !containsNUL(d.msg.Body) {
		// Keep a text message a text message on ActiveMQ.
		opts = append(opts, stomp.SendOpt.NoContentLength)
	}
	tx, err := s.cn.stomp.BeginWithError()
	if err == nil {
		err = tx.Send(dest, d.msg.ContentType, d.msg.Body, opts...)
	}
	if err == nil && ack {
		err = tx.Ack(d.msg)
	}
	if err == nil {
		err = tx.CommitWithReceipt()
	}
	if err != nil {
		what := "send to " + dest
		if ack {
			what += " + ack"
		}
		s.c.st.ackErrors.Add(1)
		s.fail(fmt.Errorf("transaction (%s): %w", what, err))
		return false
	}
	return true
}

// reserved headers are set by the broker per delivery (or by go-stomp) and
// never copied onto a resent message.
var reserved = map[string]bool{
	frame.MessageId: true, frame.Ack: true, frame.Subscription: true, frame.Destination: true,
	"redelivered": true, frame.ContentLength: true, frame.ContentType: true, frame.Transaction: true,
	frame.Receipt: true, frame.ReceiptId: true, "persistent": true,
}

// copyHeaders returns the first value of every non-reserved header.
func copyHeaders(fh *frame.Header) map[string]string {
	h := make(map[string]string, fh.Len())
	for i := 0; i < fh.Len(); i++ {
		k, v := fh.GetAt(i)
		if reserved[k] {
			continue
		}
		if _, dup := h[k]; !dup {
			h[k] = v
		}
	}
	return h
}

// message converts a delivery for the receiver.
func (c *Consumer) message(sr *subRun, d *delivery) *receiver.Message {
	fh := d.msg.Header
	h := make(map[string]string, fh.Len())
	for i := 0; i < fh.Len(); i++ {
		k, v := fh.GetAt(i)
		if _, dup := h[k]; !dup {
			h[k] = v // STOMP 1.2: the first value of a repeated header wins
		}
	}
	m := &receiver.Message{
		Destination: d.msg.Destination,
		Consumer:    sr.cfg.Name,
		Headers:     h,
		Body:        d.msg.Body,
		Redelivered: h["redelivered"] == "true",
		Attempt:     1,
	}
	if m.Destination == "" {
		m.Destination = sr.cfg.Destination
	}
	if k := h[receiver.HeaderOriginalKey]; k != "" {
		m.Key = k
	} else {
		m.Key = h[c.cfg.KeyHeader]
	}
	if n, err := strconv.Atoi(h[receiver.HeaderAttempts]); err == nil && n > 0 {
		m.Attempt = n + 1
	}
	if ms, err := strconv.ParseInt(h["timestamp"], 10, 64); err == nil && ms > 0 {
		m.Timestamp = time.UnixMilli(ms)
	}
	return m
}

func containsNUL(b []byte) bool {
	for _, c := range b {
		if c == 0 {
			return true
		}
	}
	return false
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n]
}

// checkLanes sizes the inbox's lanes (transactions open at once, each
// running its deliveries' handlers one after the other) to the handlers
// (at most bound, when bound > 0) when the inbox's options left them open,
// and refuses more lanes than that (a delivery holding a lane, and with it
// the uncommitted work of its batch, could wait for a handler slot held by
// a handler waiting for that work's locks) or than the pool's connections
// (each lane holds one).
func checkLanes(ib receiver.Selector, handlers, bound int) error {
	limit := handlers
	if bound > 0 && bound < limit {
		limit = bound
	}
	lanes := 0
	if s, ok := ib.(interface{ SizeLanes(handlers int) int }); ok {
		lanes = s.SizeLanes(limit)
	}
	if lanes > limit {
		return fmt.Errorf("%w: the inbox has %d lanes but %d handlers can take them (a subscription's Concurrency bounds its own); a delivery holding a lane must always find a handler: set the inbox's Options.Lanes to at most %d", ErrConfig, lanes, limit, limit)
	}
	if p, ok := ib.(interface{ MaxOpenConns() int }); ok {
		if n := p.MaxOpenConns(); n > 0 && n < lanes {
			return fmt.Errorf("%w: the inbox's database pool allows %d connections but the inbox has %d lanes, and each holds a connection for its open transaction; raise the pool's limit or lower Concurrency (or the inbox's Options.Lanes)", ErrConfig, n, lanes)
		}
	}
	return nil
}

// pipelined is how many of s's deliveries are in the pipeline at once
// (its InFlight, set by New before the inbox is checked).
func pipelined(s Subscription) int { return max(s.InFlight, s.Concurrency) }

// checkInbox refuses configurations that would defeat the transactional
// inbox; handlers is the number of handler goroutines, bound (0: none)
// the most lanes one subscription may hold while waiting for its own
// handlers.
func checkInbox(cfg Config, handlers, bound int) error {
	if v := reflect.ValueOf(cfg.Inbox); v.Kind() == reflect.Pointer && v.IsNil() {
		return fmt.Errorf("%w: Inbox is a nil %T", ErrConfig, cfg.Inbox)
	}
	switch {
	case cfg.Store != nil:
		return fmt.Errorf("%w: Inbox and Store both set: the inbox records keys in the handler's transaction, while a store claims and confirms outside it, and a crash between effect and confirm would leave the store's claim open; use one", ErrConfig)
	case cfg.Receiver != nil:
		return fmt.Errorf("%w: Inbox set with a prebuilt Receiver, which would run without it; put the inbox in that Receiver's Config.Selectors instead", ErrConfig)
	case cfg.DuplicatePolicy == receiver.DuplicateDeliver:
		return fmt.Errorf("%w: Inbox with DuplicateDeliver: a duplicate would reach the handler without the inbox's transaction; use another duplicate policy", ErrConfig)
	case cfg.MissingKey == receiver.MissingKeyProcess:
		return fmt.Errorf("%w: Inbox with MissingKeyProcess: a delivery without a key would reach the handler without the inbox's transaction; dead-letter it instead", ErrConfig)
	}
	return checkLanes(cfg.Inbox, handlers, bound)
}
