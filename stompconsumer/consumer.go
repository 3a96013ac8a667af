package stompconsumer

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/acemq/msgaudit/internal/admission"
	"github.com/acemq/msgaudit/internal/consumerkit"
	"github.com/acemq/msgaudit/internal/copyhdr"
	"github.com/acemq/msgaudit/internal/copysig"
	"github.com/acemq/msgaudit/internal/outboxid"
	"github.com/acemq/msgaudit/internal/redact"
	"github.com/acemq/msgaudit/outbox"
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
	sig     *copysig.Signer // signs the copies this consumer makes
	copies  bool            // CopySecret set: a failed handler's delivery is retried as a copy
	// outboxKeys: KeyHeader was unset, so a valid outboxid.Header keys a
	// delivery (as outboxid.Key) in place of its message-id.
	outboxKeys bool
	subs       []Subscription
	gates      []*admission.Gate // per subscription: its Concurrency, over every session
	running    atomic.Bool
	gen        atomic.Uint64
	st         consumerkit.Counters

	guaranteeOnce sync.Once
}

// New validates cfg and returns a Consumer. It does not connect.
func New(cfg Config) (*Consumer, error) {
	if len(cfg.Addresses) == 0 {
		return nil, fmt.Errorf("%w: no Addresses", ErrConfig)
	}
	if len(cfg.Subscriptions) == 0 {
		return nil, fmt.Errorf("%w: no Subscriptions", ErrConfig)
	}
	eps, tc, red, err := cfg.connection()
	if err != nil {
		return nil, err
	}
	if cfg.Prefetch <= 0 {
		cfg.Prefetch = defaultPrefetch
	}
	if cfg.Concurrency <= 0 {
		cfg.Concurrency = defaultConcurrency
	}
	cfg.connectionDefaults()
	if cfg.ShutdownTimeout <= 0 {
		cfg.ShutdownTimeout = defaultShutdownTimeout
	}
	if cfg.DeadLetterDestination == "" {
		cfg.DeadLetterDestination = defaultDeadLetter
	}
	outboxKeys := cfg.KeyHeader == ""
	if outboxKeys {
		cfg.KeyHeader = frame.MessageId
	}
	cfg.Pipeline.Backoff = consumerkit.WithDefaults(cfg.Pipeline.Backoff, 100*time.Millisecond, 5*time.Second, 0.2)

	log := cfg.Pipeline.Logger
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

	sig, err := copysig.New(cfg.CopySecret)
	if err != nil {
		return nil, fmt.Errorf("%w: CopySecret: %w", ErrConfig, err)
	}
	c := &Consumer{cfg: cfg, log: log, red: red, sig: sig, copies: len(cfg.CopySecret) > 0, subs: subs}
	p := cfg.Pipeline
	p.Handlers, p.LaneBound = 0, 0
	for _, s := range subs {
		c.gates = append(c.gates, admission.New(s.Concurrency))
		p.Handlers += s.Concurrency
		// A subscription that holds more deliveries in the pipeline than
		// it runs handlers could take more inbox lanes than it has
		// handlers: the lanes must not outnumber its Concurrency.
		if pipelined(s) > s.Concurrency && (p.LaneBound == 0 || s.Concurrency < p.LaneBound) {
			p.LaneBound = s.Concurrency
		}
	}
	c.dial = &dialer{endpoints: eps, tls: tc, login: cfg.Login, passcode: cfg.Passcode, vhost: cfg.VirtualHost,
		clientID: cfg.ClientID, heartBeat: cfg.Heartbeat, timeout: cfg.ConnectTimeout,
		maxHeader: cfg.MaxHeaderBytes, maxBody: cfg.MaxBodyBytes, keep: []string{cfg.KeyHeader}, log: log, red: red}
	if outboxKeys {
		c.outboxKeys = true
		c.dial.keep = append(c.dial.keep, outboxid.Header)
	}

	if p.Audit == nil {
		if p.Audit, err = defaultAudit(); err != nil {
			return nil, err
		}
	}
	if p.KeyFunc != nil {
		p.KeyFunc = carriedKey(p.KeyFunc)
	}
	p.Logger = log
	if c.rcv, err = receiver.New(p); err != nil {
		return nil, fmt.Errorf("%w: Pipeline: %w", ErrConfig, err)
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

// logGuarantee says once, at the first Run, what the duplicate detection
// survives.
func (c *Consumer) logGuarantee() {
	c.guaranteeOnce.Do(func() {
		consumerkit.LogGuarantee(c.log, "stompconsumer", c.cfg.Pipeline)
		if c.copies {
			c.log.Info("stompconsumer: retries: a failed handler's queue delivery is retried as a signed copy sent to the back of its queue; every consumer of these queues must share this CopySecret")
		} else {
			c.log.Info("stompconsumer: retries: in place (no Config.CopySecret): a failed delivery is handled again on the same delivery, unacknowledged, after the backoff")
		}
	})
}

// carriedKey wraps a key function so that a copy this package resent (a
// retry or a dead letter) is keyed by the key it carries in
// x-original-key, and every other delivery by f. The Consumer removes that
// header from every delivery whose copy signature does not verify (see
// Config.CopySecret) before the key function sees it.
func carriedKey(f receiver.KeyFunc) receiver.KeyFunc {
	return func(m *receiver.Message) (string, error) {
		if k := m.Headers[copyhdr.OriginalKey]; k != "" {
			return k, nil
		}
		return f(m)
	}
}

// Metrics returns the pipeline's counters (expose them to Prometheus with
// promexport.Receiver(c.Metrics().Snapshot, "stomp"), and the transport's
// with promexport.Transport(c.Stats, "stomp")).
func (c *Consumer) Metrics() *receiver.Metrics { return c.metrics }

// Stats returns a snapshot of the transport counters. STOMP keeps
// Connects, Reconnects, ConnectErrors, RetriesSent, LocalRetries,
// DeadLetters (dead-letter copies committed with the original's ACK; a
// record of each frame cut by the size limits counts too), Oversized,
// Dropped, StaleAcks, AckErrors (each ends the connection) and
// Generation; the others stay zero.
func (c *Consumer) Stats() receiver.TransportStats { return c.st.Stats(c.gen.Load()) }

// Run connects, subscribes and consumes until ctx is cancelled, then stops
// gracefully and returns nil: it stops dispatching, lets in-flight
// handlers finish (for at most ShutdownTimeout, after which their context
// is cancelled), acknowledges them and disconnects. A worker whose
// acknowledgement is still blocked in the STOMP client a few seconds
// after that (its connection gone, or a broker that stopped reading) is
// abandoned, with a log line, and its delivery stays unacknowledged.
// Deliveries received but not started are not acknowledged; the broker
// sends them again.
//
// A lost connection is not an error: Run reconnects to the next address
// with ReconnectBackoff and resubscribes. At start Run keeps trying until
// a broker answers or ctx is done, unless ConnectRetries bounds the
// attempts: then it returns an error wrapping ErrConnect once they have
// failed. It returns ErrRejected when a broker refuses the CONNECT
// (credentials) and ErrTLS when a certificate fails verification; those
// two are never retried. A Consumer runs once at a time (ErrRunning).
func (c *Consumer) Run(ctx context.Context) error {
	if !c.running.CompareAndSwap(false, true) {
		return ErrRunning
	}
	defer c.running.Store(false)
	c.logGuarantee()

	// Handlers outlive ctx by up to ShutdownTimeout.
	hctx, hcancel := context.WithCancel(context.WithoutCancel(ctx))
	defer hcancel()

	// The outbox relay outlives ctx as the handlers do, and stops after them.
	if c.cfg.Outbox != nil {
		stopRelay := consumerkit.StartRelay(hctx, c.log, "stompconsumer", c.cfg.ReconnectBackoff,
			func(ctx context.Context) (outbox.Publisher, error) { return NewPublisher(ctx, c.cfg) },
			func(p outbox.Publisher) { _ = p.(*Publisher).Close() }, c.cfg.Outbox.Run)
		defer stopRelay()
	}
	stopGrace := context.AfterFunc(ctx, func() {
		t := time.AfterFunc(c.cfg.ShutdownTimeout, hcancel)
		context.AfterFunc(hctx, func() { t.Stop() })
	})
	defer stopGrace()

	// Workers blocked in a go-stomp call are abandoned once giveUp is
	// closed: ShutdownTimeout plus stuckWait after ctx ends or Run returns,
	// whichever comes first (see session.waitWorkers).
	giveUp := make(chan struct{})
	startGiveUp := sync.OnceFunc(func() {
		time.AfterFunc(c.cfg.ShutdownTimeout+stuckWait, func() { close(giveUp) })
	})
	defer context.AfterFunc(ctx, startGiveUp)()

	var old sync.WaitGroup // workers of lost connections still finishing
	defer func() {
		startGiveUp() // when Run returns an error before ctx ends
		old.Wait()
	}()

	retries := c.cfg.ConnectRetries
	if retries <= 0 {
		retries = -1 // the default: until ctx is done
	}
	cn, idx, err := c.connect(ctx, 0, retries, false)
	if err != nil {
		if ctx.Err() != nil && !errors.Is(err, ErrRejected) && !errors.Is(err, ErrTLS) {
			return nil
		}
		return err
	}
	short := 0 // consecutive sessions that broke at once
	for {
		s := c.newSession(cn, hctx, giveUp)
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
			if !consumerkit.Sleep(ctx, c.cfg.ReconnectBackoff.Delay(short-1)) {
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

// connect tries the endpoints in rotation from index start, giving up
// after retries failed retries (retries < 0: until ctx is done). Between
// rounds over the address list it waits ReconnectBackoff. Each failed
// attempt is logged with its address, number, error and the wait before
// the next one. Permanent errors (rejected CONNECT, certificate) end the
// loop at once.
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
			c.st.Connects.Add(1)
			if reconnect {
				c.st.Reconnects.Add(1)
				c.metrics.Reconnects.Add(1)
			}
			c.log.Info("stompconsumer: connected", "address", eps[i].String(), "session", cn.stomp.Session(),
				"server", cn.stomp.Server(), "reconnect", reconnect)
			return cn, i, nil
		}
		c.st.ConnectErrors.Add(1)
		last = err
		if permanent(err) {
			c.log.Error("stompconsumer: connection refused for good; not retrying", "address", eps[i].String(), "err", err)
			return nil, 0, err
		}
		if retries >= 0 && attempt >= retries {
			c.log.Warn("stompconsumer: connect failed; giving up", "address", eps[i].String(), "attempt", attempt+1, "err", err)
			addrs := make([]string, len(eps))
			for j, ep := range eps {
				addrs[j] = ep.String()
			}
			return nil, 0, fmt.Errorf("%w after %d attempts to %v: %w", ErrConnect, attempt+1, addrs, err)
		}
		var wait time.Duration // the next address at once, within a round
		if (attempt+1)%len(eps) == 0 {
			wait = c.cfg.ReconnectBackoff.Delay((attempt+1)/len(eps) - 1)
		}
		c.log.Warn("stompconsumer: connect failed; retrying", "address", eps[i].String(), "attempt", attempt+1, "err", err,
			"next_address", eps[(i+1)%len(eps)].String(), "next_wait", wait)
		consumerkit.Sleep(ctx, wait)
	}
}

// delivery is one MESSAGE received on one connection.
type delivery struct {
	msg *stomp.Message
	cut string // why the limiter cut the frame, "" if it did not
}

// session is one connection and its subscriptions (one generation).
type session struct {
	c      *Consumer
	gen    uint64
	cn     *conn
	hctx   context.Context // handlers' context (outlives Run's ctx by ShutdownTimeout)
	giveUp <-chan struct{} // closed when workers blocked in go-stomp are abandoned
	mu     sync.Mutex      // guards subs against fail running while run subscribes
	subs   []*subRun
	start  time.Time
	recvd  atomic.Uint64 // deliveries received
	lost   chan struct{} // closed when the connection is lost
	stop   chan struct{} // closed when a graceful stop begins
	quit   chan struct{} // closed when either happens: deliveries claimed ahead are abandoned
	quitO  sync.Once
	once   sync.Once
	err    error
	dead   atomic.Bool
	wk     sync.WaitGroup // workers
	rd     sync.WaitGroup // readers
	stopO  sync.Once
	// working counts the workers that have not returned, inStomp those of
	// them in a go-stomp call that can block for good (see waitWorkers).
	working, inStomp atomic.Int32
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

func (c *Consumer) newSession(cn *conn, hctx context.Context, giveUp <-chan struct{}) *session {
	return &session{c: c, gen: c.gen.Add(1), cn: cn, hctx: hctx, giveUp: giveUp, start: time.Now(),
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
			ctx: admission.With(s.hctx, s.c.gates[i], s.quit)}
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
			s.working.Add(1)
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
			s.c.st.Dropped.Add(uint64(sr.q.close()))
		}
		s.mu.Unlock()
		close(s.lost)
		s.halt()
		// The socket first: it ends go-stomp's reads and writes. go-stomp
		// v3.1.3's MustDisconnect takes the connection's lock, which a send
		// blocked on its full write queue holds; once the connection's
		// loop has exited (into its own deferred MustDisconnect, which
		// waits the same way) nothing empties that queue, and the lock is
		// never released. So MustDisconnect runs on a goroutine of its
		// own and fail never waits for it: that goroutine may stay blocked
		// for good, at most one per lost connection.
		_ = s.cn.net.Close()
		go func() { _ = s.cn.stomp.MustDisconnect() }()
	})
}

// finish waits for a lost session's workers (their handlers complete and
// settle with the pipeline; nothing is acknowledged; those stuck in
// go-stomp only until giveUp) and, briefly, its readers.
func (s *session) finish() {
	s.waitWorkers()
	waitTimeout(&s.rd, readerWait)
}

// stuckWait is how long past ShutdownTimeout (when the handlers' context
// is cancelled) a worker blocked in a go-stomp call is waited for.
const stuckWait = 3 * time.Second

// waitWorkers waits for the session's workers to return. Once giveUp is
// closed it stops waiting for those blocked in a go-stomp call: go-stomp
// v3.1.3 puts a frame on its connection's write queue without a bound
// while holding the connection's lock, so a broker that stopped reading
// blocks the call, and once the connection's loop has exited nothing
// empties the queue and the call never returns. Such workers are
// abandoned, with one log line: each has settled its delivery with the
// pipeline, and the delivery stays unacknowledged. A worker in a handler
// (whose context is cancelled by then) is still waited for. It returns
// how many workers it abandoned.
func (s *session) waitWorkers() int {
	done := make(chan struct{})
	go func() { s.wk.Wait(); close(done) }()
	select {
	case <-done:
		return 0
	case <-s.giveUp:
	}
	if n, in := s.working.Load(), s.inStomp.Load(); n > in {
		s.c.log.Warn("stompconsumer: still waiting for workers in a handler (its context cancelled) or a commit",
			"generation", s.gen, "workers", n-in)
	}
	tick := time.NewTicker(stuckPoll)
	defer tick.Stop()
	for {
		// working first: a worker enters and leaves go-stomp while it is
		// counted as working, so equal counts mean that every worker left
		// was in a go-stomp call.
		if n := s.working.Load(); n > 0 && n == s.inStomp.Load() {
			s.c.log.Error("stompconsumer: abandoning workers stuck in a go-stomp call; their deliveries stay unacknowledged",
				"generation", s.gen, "workers", n)
			return int(n)
		}
		select {
		case <-done:
			return 0
		case <-tick.C:
		}
	}
}

// stuckPoll is how often waitWorkers looks again, past giveUp, whether
// only workers blocked in go-stomp are left.
const stuckPoll = 100 * time.Millisecond

// disconnectWait bounds the DISCONNECT, whose receipt go-stomp waits for
// receiptTimeout: its frame goes on the write queue without a bound.
const disconnectWait = receiptTimeout + time.Second

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
		s.c.st.Dropped.Add(uint64(sr.q.close()))
	}
	s.mu.Unlock()
	stuck := s.waitWorkers()
	if !s.dead.Load() && stuck == 0 {
		// No UNSUBSCRIBE first: ActiveMQ silently ignores an ACK sent after
		// UNSUBSCRIBE, so it could only come after the in-flight
		// deliveries were settled (above), where DISCONNECT ends the
		// subscriptions just the same. (go-stomp v3.1.3's Unsubscribe can
		// also miss its receipt's wake-up and stall for its timeout.) The
		// DISCONNECT receipt confirms that the broker processed every ACK
		// and transaction sent before it. A worker stuck in go-stomp holds
		// the lock Disconnect takes: then the socket is just closed.
		s.disconnect()
	}
	s.dead.Store(true)
	_ = s.cn.net.Close()
	waitTimeout(&s.rd, readerWait)
	s.c.log.Info("stompconsumer: stopped", "generation", s.gen)
}

// disconnect sends DISCONNECT and waits for its receipt, for at most
// disconnectWait; past it the caller closes the socket, and the call,
// blocked on go-stomp's full write queue (a broker that stopped reading),
// is abandoned: its goroutine may stay blocked for good, at most one per
// connection.
func (s *session) disconnect() {
	done := make(chan error, 1)
	go func() { done <- s.cn.stomp.Disconnect() }()
	t := time.NewTimer(disconnectWait)
	defer t.Stop()
	select {
	case err := <-done:
		if err != nil {
			s.c.log.Warn("stompconsumer: disconnect failed", "err", s.c.red.Error(err))
		}
	case <-t.C:
		s.c.log.Warn("stompconsumer: disconnect did not return; closing the connection", "after", disconnectWait)
	}
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
			s.c.st.Dropped.Add(1)
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
	defer sr.s.working.Add(-1)
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
		c.st.Dropped.Add(1)
		return
	}
	m := c.message(sr, d)
	if d.cut != "" {
		s.deadLetterCut(d, m)
		return
	}
	handBacks := 0 // deferrals retried in place so far
	for {
		res := c.rcv.Process(sr.ctx, m, sr.cfg.Handler)
		if res.Action == receiver.Requeue && !res.Ran && errors.Is(res.Err, receiver.ErrAbandoned) {
			// Claimed ahead of a handler, never started: the connection
			// was lost or a graceful stop began meanwhile. The pipeline
			// has rolled it back; unacknowledged, the broker sends it
			// again.
			c.st.Dropped.Add(1)
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
			// In place, not as a copy: everything without a CopySecret
			// (a copy that another consumer, or this one after a
			// restart, cannot authenticate is a new message to it, with
			// the default key keyed by its own message-id, and applies
			// the message again once a producer's duplicate of it was
			// applied elsewhere); a topic (a copy would reach every
			// subscriber); a delivery whose handler succeeded but whose
			// confirm failed (its effect may be committed); and a
			// delivery deferred without running (its key in flight
			// elsewhere, or the store down), since the other delivery of
			// its key may complete. Only a handler's failure, whose
			// effect was rolled back, becomes a copy, and only with a
			// CopySecret. In place, the delivery stays unacknowledged on
			// this connection and the receiver counts its attempts, so
			// MaxAttempts holds; a lost connection or a crash brings the
			// original back from the broker with its own message-id.
			retryInPlace := !c.copies || sr.topic || res.Reason == confirmError || !res.Ran
			delay := res.RetryAfter
			if !res.Ran {
				// Outcome unknown (in flight elsewhere, store down): back
				// off by the hand-backs so far, so an outage is not a hot
				// loop.
				delay = max(delay, c.cfg.Pipeline.Backoff.Delay(handBacks))
				handBacks++
			}
			s.wait(delay)
			if s.dead.Load() {
				// Its connection is gone: nothing can be sent for it; the
				// broker sends it again.
				c.st.StaleAcks.Add(1)
				return
			}
			if retryInPlace {
				select {
				case <-s.stop:
					return // not acknowledged: see Run
				default:
				}
				c.st.LocalRetries.Add(1)
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
		s.c.st.StaleAcks.Add(1)
		return nil
	}
	s.inStomp.Add(1)
	err := send()
	s.inStomp.Add(-1)
	if err != nil {
		s.c.st.AckErrors.Add(1)
		s.fail(fmt.Errorf("acknowledge: %w", err))
		return err
	}
	return nil
}

// confirmError is the receiver's Result.Reason for a handler that
// succeeded and a confirm (store or inbox commit) that failed.
const confirmError = "confirm-error"

// requeue sends a retry copy of d, whose handler failed, to its
// destination and acknowledges d in one transaction (only with a
// CopySecret, see handle).
func (s *session) requeue(d *delivery, m *receiver.Message, res receiver.Result) {
	h := copyHeaders(d.msg.Header)
	h[copyhdr.OriginalKey] = m.IdempotencyKey()
	// Only a failed handler is copied (see handle): res.Attempt is the
	// attempts made, this one included.
	h[copyhdr.Attempts] = strconv.Itoa(max(res.Attempt, 0))
	h[HeaderRetryReason] = res.Reason
	if s.resend(d, m.Destination, h) {
		s.c.st.RetriesSent.Add(1)
	}
}

// deadLetter sends a copy of d with the reason to the dead-letter
// destination and acknowledges d in one transaction.
func (s *session) deadLetter(d *delivery, m *receiver.Message, res receiver.Result) {
	h := copyHeaders(d.msg.Header)
	if k := m.IdempotencyKey(); k != "" {
		h[copyhdr.OriginalKey] = k
	}
	h[copyhdr.DeadLetterReason] = truncate(res.Reason, 1024)
	h[copyhdr.Attempts] = strconv.Itoa(res.Attempt)
	h[HeaderOriginalDestination] = m.Destination
	if s.resend(d, s.c.cfg.DeadLetterDestination, h) {
		s.c.st.DeadLetters.Add(1)
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
	c.st.Oversized.Add(1)
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
		h[copyhdr.OriginalKey] = k
	}
	h[copyhdr.DeadLetterReason] = truncate(d.cut, 1024)
	h[copyhdr.Attempts] = "0"
	h[HeaderOriginalDestination] = m.Destination
	h[HeaderBodyOmitted] = "true"
	if msgID != "" {
		h[HeaderOriginalMessageID] = msgID
	}
	if !persistent {
		if s.resend(d, c.cfg.DeadLetterDestination, h) {
			c.st.DeadLetters.Add(1)
		}
		return
	}
	h[HeaderOriginalNacked] = "true"
	if !s.commitCopy(d, c.cfg.DeadLetterDestination, h, false) {
		return // not confirmed: the original comes back
	}
	c.st.DeadLetters.Add(1)
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
// whether the commit was confirmed by its receipt. The copy is signed (see
// Config.CopySecret) over the key and attempts h carries and the body. A
// failure ends the connection.
func (s *session) commitCopy(d *delivery, dest string, h map[string]string, ack bool) bool {
	if s.dead.Load() {
		s.c.st.StaleAcks.Add(1)
		return false
	}
	h[copysig.Header] = s.c.sig.Sign(h[copyhdr.OriginalKey], h[copyhdr.Attempts], d.msg.Body)
	opts := make([]func(*frame.Frame) error, 0, len(h)+2)
	for k, v := range h {
		opts = append(opts, stomp.SendOpt.Header(k, v))
	}
	opts = append(opts, stomp.SendOpt.Header("persistent", "true"))
	if _, ok := d.msg.Header.Contains(frame.ContentLength); !ok && !containsNUL(d.msg.Body) {
		// Keep a text message a text message on ActiveMQ.
		opts = append(opts, stomp.SendOpt.NoContentLength)
	}
	s.inStomp.Add(1) // these three can block for good, like settle's
	tx, err := s.cn.stomp.BeginWithError()
	if err == nil {
		err = tx.Send(dest, d.msg.ContentType, d.msg.Body, opts...)
	}
	if err == nil && ack {
		err = tx.Ack(d.msg)
	}
	s.inStomp.Add(-1)
	if err == nil {
		err = s.commitWithin(tx)
	}
	if err != nil {
		what := "send to " + dest
		if ack {
			what += " + ack"
		}
		s.c.st.AckErrors.Add(1)
		s.fail(fmt.Errorf("transaction (%s): %w", what, err))
		return false
	}
	return true
}

// commitWithin commits tx and waits for the broker's receipt, at most
// commitTimeout: then it fails the connection, which closes it and
// answers the wait with an error. Either the whole transaction (the copy
// and the original's ACK) took effect or none of it did, and a failed
// connection brings every unacknowledged delivery back, so an unknown
// outcome loses nothing.
func (s *session) commitWithin(tx *stomp.Transaction) error {
	done := make(chan error, 1)
	go func() { done <- tx.CommitWithReceipt() }()
	t := time.NewTimer(commitTimeout)
	defer t.Stop()
	select {
	case err := <-done:
		return err
	case <-t.C:
	}
	err := fmt.Errorf("no receipt for COMMIT within %v", commitTimeout)
	s.fail(err)
	select {
	case cerr := <-done:
		return cerr
	case <-time.After(receiptTimeout):
		return err
	}
}

// reserved headers are set by the broker per delivery (or by go-stomp) and
// never copied onto a resent message. The copy headers are set by the
// copy's maker alone and signed by commitCopy, so a producer's (or an
// earlier copy's) values never pass on.
var reserved = map[string]bool{
	frame.MessageId: true, frame.Ack: true, frame.Subscription: true, frame.Destination: true,
	"redelivered": true, frame.ContentLength: true, frame.ContentType: true, frame.Transaction: true,
	frame.Receipt: true, frame.ReceiptId: true, "persistent": true,
	copyhdr.OriginalKey: true, copyhdr.Attempts: true, copysig.Header: true,
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
	c.trustCopyHeaders(h, d.msg.Body)
	m.Key = c.key(h)
	if n, err := strconv.Atoi(h[copyhdr.Attempts]); err == nil && n > 0 {
		m.Attempt = n + 1
	}
	if ms, err := strconv.ParseInt(h["timestamp"], 10, 64); err == nil && ms > 0 {
		m.Timestamp = time.UnixMilli(ms)
	}
	return m
}

// key is the key of a delivery with headers h (its copy headers already
// checked by trustCopyHeaders): the key a copy carries; else, in the
// default configuration (no KeyHeader), outboxid.Key of a valid
// outboxid.Header, which a relay's resend repeats; else the KeyHeader
// (the broker's message-id by default). An invalid outboxid.Header (too
// long, a character outboxid.Valid refuses) is ignored: the delivery is
// keyed by its message-id, as any other.
func (c *Consumer) key(h map[string]string) string {
	if k := h[copyhdr.OriginalKey]; k != "" {
		return k
	}
	if c.outboxKeys {
		if id, ok := h[outboxid.Header]; ok && outboxid.Valid(id) {
			return outboxid.Key(id)
		}
	}
	return h[c.cfg.KeyHeader]
}

// trustCopyHeaders keeps the key and attempt count a copy carries
// (copyhdr.OriginalKey, copyhdr.Attempts) in h only when
// the copy's signature verifies for them and body: a copy this consumer,
// or one sharing its CopySecret, made. It removes them otherwise, and the
// signature always, so the receiver and key functions see only what a
// consumer vouched for.
func (c *Consumer) trustCopyHeaders(h map[string]string, body []byte) {
	sig := h[copysig.Header]
	delete(h, copysig.Header)
	k, hasKey := h[copyhdr.OriginalKey]
	a, hasAttempts := h[copyhdr.Attempts]
	if !hasKey && !hasAttempts {
		return
	}
	if sig != "" && c.sig.Verify(sig, k, a, body) {
		return
	}
	delete(h, copyhdr.OriginalKey)
	delete(h, copyhdr.Attempts)
	c.log.Debug("stompconsumer: copy headers without a valid signature ignored; the delivery is keyed by its own id",
		"destination", h[frame.Destination], "message-id", h[frame.MessageId], "signed", sig != "")
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

// pipelined is how many of s's deliveries are in the pipeline at once
// (its InFlight, as New set it).
func pipelined(s Subscription) int { return max(s.InFlight, s.Concurrency) }
