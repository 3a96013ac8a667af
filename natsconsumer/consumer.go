package natsconsumer

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/acemq/msgaudit/internal/admission"
	"github.com/acemq/msgaudit/internal/consumerkit"
	"github.com/acemq/msgaudit/internal/copyhdr"
	"github.com/acemq/msgaudit/internal/keyjoin"
	"github.com/acemq/msgaudit/internal/redact"
	"github.com/acemq/msgaudit/internal/tlsconf"
	"github.com/acemq/msgaudit/outbox"
	"github.com/acemq/msgaudit/receiver"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// pullWait is how long one pull request waits for messages. A graceful
// stop lets the last one run out rather than abandon it (the server
// would send its messages to an inbox nobody reads, and they would come
// back only after AckWait), so it bounds how long a stop waits for it.
const pullWait = 2 * time.Second

// Consumer consumes one JetStream durable pull consumer through the
// duplicate pipeline of package receiver. Create it with New and start
// it with Run.
type Consumer struct {
	cfg     Config
	tls     *tls.Config
	rcv     *receiver.Receiver
	metrics *receiver.Metrics
	log     *slog.Logger
	red     redact.Redactor
	gate    *admission.Gate // Concurrency: the handlers running at once, over every generation
	slots   chan struct{}   // InFlight: the deliveries held at once, over every generation
	running atomic.Bool
	gen     atomic.Uint64
	st      consumerkit.Counters

	mu   sync.Mutex
	cur  *generation   // the connection's current generation; nil before Run
	wake chan struct{} // signalled when a new generation starts

	guaranteeOnce sync.Once

	// dlStream is the stream that captures DeadLetterSubject, found by
	// setup: a dead-letter record counts as stored only when that stream
	// acknowledges it.
	dlStream atomic.Pointer[string]
}

// generation is one stretch of the connection between a connect and the
// next disconnect. When it ends, deliveries waiting for a handler are
// abandoned (their audit bits rolled back, their claims released) and
// handed back, and nothing more is pulled on it.
type generation struct {
	n        uint64
	stop     chan struct{} // closed when the connection is lost or a graceful stop begins
	stopOnce sync.Once
	dead     atomic.Bool // the connection was lost
}

func (g *generation) halt() { g.stopOnce.Do(func() { close(g.stop) }) }

func (g *generation) stopped() bool {
	select {
	case <-g.stop:
		return true
	default:
		return false
	}
}

// New validates cfg and returns a Consumer. It does not connect.
func New(cfg Config) (*Consumer, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	tc, err := cfg.tlsConfig()
	if err != nil {
		return nil, err
	}
	red := redact.New(cfg.secrets()...)
	log := cfg.Pipeline.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	log = slog.New(redact.NewHandler(log.Handler(), red)).With("stream", cfg.Stream, "consumer", cfg.Consumer)
	p := cfg.Pipeline
	p.Handlers = cfg.Concurrency
	p.Logger = log
	if p.Audit == nil {
		if p.Audit, err = defaultAudit(); err != nil {
			return nil, fmt.Errorf("%w: %w", ErrConfig, err)
		}
	}
	rcv, err := receiver.New(p)
	if err != nil {
		return nil, fmt.Errorf("%w: Pipeline: %w", ErrConfig, err)
	}
	return &Consumer{cfg: cfg, tls: tc, rcv: rcv, metrics: rcv.Metrics(), log: log, red: red,
		gate: admission.New(cfg.Concurrency), slots: make(chan struct{}, cfg.InFlight),
		wake: make(chan struct{}, 1)}, nil
}

// Metrics returns the pipeline's counters. Export them to Prometheus with
// promexport.Receiver(c.Metrics().Snapshot, "nats"), and the transport's
// with promexport.Transport(c.Stats, "nats").
func (c *Consumer) Metrics() *receiver.Metrics { return c.metrics }

// Stats returns the transport's counters. JetStream keeps Connects,
// Reconnects, ConnectErrors, Lost (disconnects while consuming), Acks,
// Requeues (NakWithDelay of failed deliveries, and of deferred ones when
// a stop or a connection loss ends their wait), LocalRetries (deferred
// deliveries tried again in place), DeadLetters
// (records the dead-letter stream acknowledged, their originals then
// terminated), DeadLetterErrors, Dropped (deliveries handed back unhandled
// because their connection was lost or the consumer stopped), AckErrors
// (acknowledgements the client could not send or the server did not
// confirm) and Generation; the others stay zero.
func (c *Consumer) Stats() receiver.TransportStats { return c.st.Stats(c.gen.Load()) }

// Run consumes until ctx is cancelled. On cancellation it stops pulling,
// hands back the deliveries whose handler had not started, lets running
// handlers finish (Config.ShutdownTimeout), settles them, flushes the
// acknowledgements to the server and closes the connection, then returns
// nil. The client reconnects by itself after a connection loss. At start
// Run keeps trying to connect until ctx is done unless
// Config.ConnectRetries bounds the attempts. It returns early with
// ErrConnect (no connection within ConnectRetries), ErrRejected
// (credentials refused), ErrTLS (certificate verification failed) or
// ErrNoStream (the stream, or a stream for the dead-letter subject, does
// not exist) or ErrConfig (the stream captures the dead-letter subject the
// consumer reads, or the server refuses the durable consumer's
// configuration, for example a filter outside the stream's subjects or an
// existing push consumer of that name).
func (c *Consumer) Run(ctx context.Context) error {
	if !c.running.CompareAndSwap(false, true) {
		return ErrRunning
	}
	defer c.running.Store(false)
	c.guaranteeOnce.Do(func() { consumerkit.LogGuarantee(c.log, "natsconsumer", c.cfg.Pipeline) })

	nc, err := c.connect(ctx)
	if nc == nil {
		return err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return c.red.Error(err)
	}
	cons, err := c.setup(ctx, js)
	if err != nil {
		if ctx.Err() != nil && !errors.Is(err, ErrNoStream) && !errors.Is(err, ErrConfig) {
			return nil
		}
		return err
	}

	// Handlers get a context that outlives ctx by ShutdownTimeout.
	hctx, hcancel := context.WithCancel(context.WithoutCancel(ctx))
	defer hcancel()

	// The outbox relay outlives ctx as the handlers do, and stops after them.
	if c.cfg.Outbox != nil {
		stopRelay := consumerkit.StartRelay(hctx, c.log, "natsconsumer", c.cfg.ReconnectBackoff,
			func(ctx context.Context) (outbox.Publisher, error) { return NewPublisher(ctx, c.cfg) },
			func(p outbox.Publisher) { _ = p.(*Publisher).Close() }, c.cfg.Outbox.Run)
		defer stopRelay()
	}
	stopHandlers := context.AfterFunc(ctx, func() {
		t := time.NewTimer(c.cfg.ShutdownTimeout)
		defer t.Stop()
		select {
		case <-t.C:
			hcancel()
		case <-hctx.Done():
		}
	})
	defer stopHandlers()

	var workers sync.WaitGroup
	c.pull(ctx, hctx, nc, js, cons, &workers)
	// Graceful stop: deliveries waiting for a handler are abandoned and
	// handed back; running handlers finish and settle.
	c.mu.Lock()
	g := c.cur
	c.mu.Unlock()
	g.halt()
	workers.Wait()
	if !nc.IsConnected() {
		c.log.Warn("natsconsumer: stopped while disconnected; the server delivers unacknowledged messages again after AckWait")
	} else if err := nc.FlushTimeout(c.cfg.ConnectTimeout); err != nil {
		c.log.Warn("natsconsumer: flushing the last acknowledgements failed; the server delivers their messages again", "err", c.red.Error(err))
	}
	c.log.Info("natsconsumer: stopped", "generation", g.n)
	return nil
}

// connect dials until a server answers, ctx ends (nil, nil) or the
// attempts bounded by ConnectRetries have failed.
func (c *Consumer) connect(ctx context.Context) (*nats.Conn, error) {
	addr := c.cfg.redactedURL()
	// The generation exists before the connection, so that the
	// connection's callbacks always find one.
	c.newGeneration()
	for failures := 0; ctx.Err() == nil; {
		nc, err := nats.Connect(c.cfg.URL, c.natsOptions()...)
		if err == nil {
			c.st.Connects.Add(1)
			c.log.Info("natsconsumer: connected", "server", nc.ConnectedUrlRedacted(), "generation", c.gen.Load())
			return nc, nil
		}
		err = c.classify(err)
		if errors.Is(err, ErrRejected) || errors.Is(err, ErrTLS) {
			return nil, err
		}
		c.st.ConnectErrors.Add(1)
		failures++
		if c.cfg.ConnectRetries > 0 && failures > c.cfg.ConnectRetries {
			c.log.Warn("natsconsumer: connect failed; giving up", "address", addr, "attempt", failures, "err", err)
			return nil, fmt.Errorf("%w: %s after %d attempts: %w", ErrConnect, addr, failures, err)
		}
		wait := c.cfg.ReconnectBackoff.Delay(failures - 1)
		c.log.Warn("natsconsumer: connect failed; retrying", "address", addr, "attempt", failures, "err", err, "next_wait", wait)
		if !consumerkit.Sleep(ctx, wait) {
			break
		}
	}
	return nil, nil
}

// classify maps a connection error to ErrRejected / ErrTLS where
// retrying cannot help, and redacts it.
func (c *Consumer) classify(err error) error { return classify(err, c.cfg, c.red) }

// classify maps an error of a connection with cfg to ErrRejected /
// ErrTLS where retrying cannot help, and redacts it with red.
func classify(err error, cfg Config, red redact.Redactor) error {
	if errors.Is(err, nats.ErrAuthorization) || errors.Is(err, nats.ErrAuthExpired) || errors.Is(err, nats.ErrAuthRevoked) ||
		strings.Contains(strings.ToLower(err.Error()), "authorization violation") {
		return red.Error(fmt.Errorf("%w: %s: %w", ErrRejected, cfg.redactedURL(), err))
	}
	if tlsconf.Permanent(err) {
		return red.Error(fmt.Errorf("%w: %s: %w", ErrTLS, cfg.redactedURL(), err))
	}
	return red.Error(err)
}

// setup checks the stream and the dead-letter stream and creates or
// updates the durable consumer, retrying what may be transient until ctx
// ends.
func (c *Consumer) setup(ctx context.Context, js jetstream.JetStream) (jetstream.Consumer, error) {
	for attempt := 0; ; attempt++ {
		cons, err := c.setupOnce(ctx, js)
		if err == nil || errors.Is(err, ErrNoStream) || errors.Is(err, ErrConfig) {
			return cons, err
		}
		var api *jetstream.APIError
		if errors.As(err, &api) && api.Code == 400 {
			// The server refuses the consumer's configuration (a filter
			// outside the stream's subjects, an existing consumer of
			// another kind): retrying cannot help.
			return nil, c.red.Error(fmt.Errorf("%w: %w", ErrConfig, err))
		}
		err = c.red.Error(err)
		if ctx.Err() != nil {
			return nil, err
		}
		wait := c.cfg.ReconnectBackoff.Delay(attempt)
		c.log.Warn("natsconsumer: setting up the consumer failed; retrying", "err", err, "next_wait", wait)
		if !consumerkit.Sleep(ctx, wait) {
			return nil, err
		}
	}
}

func (c *Consumer) setupOnce(ctx context.Context, js jetstream.JetStream) (jetstream.Consumer, error) {
	rctx, cancel := context.WithTimeout(ctx, c.cfg.ConnectTimeout)
	defer cancel()
	st, err := js.Stream(rctx, c.cfg.Stream)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return nil, fmt.Errorf("%w: %q on %s; create it first", ErrNoStream, c.cfg.Stream, c.cfg.redactedURL())
	}
	if err != nil {
		return nil, fmt.Errorf("stream %q: %w", c.cfg.Stream, err)
	}
	dl, err := js.StreamNameBySubject(rctx, c.cfg.DeadLetterSubject)
	if err != nil {
		if errors.Is(err, jetstream.ErrStreamNotFound) {
			return nil, fmt.Errorf("%w: no stream captures the dead-letter subject %q; create one that does", ErrNoStream, c.cfg.DeadLetterSubject)
		}
		return nil, fmt.Errorf("dead-letter subject %q: %w", c.cfg.DeadLetterSubject, err)
	}
	if err := c.checkLoop(st.CachedInfo().Config.Subjects, dl); err != nil {
		return nil, err
	}
	c.dlStream.Store(&dl)
	cc := jetstream.ConsumerConfig{
		Durable:    c.cfg.Consumer,
		AckPolicy:  jetstream.AckExplicitPolicy,
		AckWait:    c.cfg.AckWait,
		MaxDeliver: -1,
	}
	switch len(c.cfg.FilterSubjects) {
	case 0:
	case 1:
		cc.FilterSubject = c.cfg.FilterSubjects[0]
	default:
		cc.FilterSubjects = c.cfg.FilterSubjects
	}
	cons, err := st.CreateOrUpdateConsumer(rctx, cc)
	if err != nil {
		return nil, fmt.Errorf("create or update consumer %q: %w", c.cfg.Consumer, err)
	}
	return cons, nil
}

// checkLoop refuses a consumed stream that captures the dead-letter
// subject (one of its subjects, wildcards included, matches it, or the
// server names it as the subject's stream dl) when the consumer reads
// that subject too (no FilterSubjects, or one that matches it): each
// record would come back to the consumer, fail and be dead-lettered
// again, forever.
func (c *Consumer) checkLoop(subjects []string, dl string) error {
	captured := dl == c.cfg.Stream
	for _, s := range subjects {
		if subjectMatches(s, c.cfg.DeadLetterSubject) {
			captured = true
		}
	}
	if !captured {
		return nil
	}
	reads := len(c.cfg.FilterSubjects) == 0
	for _, f := range c.cfg.FilterSubjects {
		if subjectMatches(f, c.cfg.DeadLetterSubject) {
			reads = true
		}
	}
	if !reads {
		return nil
	}
	return fmt.Errorf("%w: the stream %q captures the dead-letter subject %q and the consumer reads it: dead letters would come back to it; "+
		"capture the subject in another stream, or set FilterSubjects that leave it out", ErrConfig, c.cfg.Stream, c.cfg.DeadLetterSubject)
}

// newGeneration starts a generation and wakes the puller.
func (c *Consumer) newGeneration() *generation {
	g := &generation{n: c.gen.Add(1), stop: make(chan struct{})}
	c.mu.Lock()
	old := c.cur
	c.cur = g
	c.mu.Unlock()
	if old != nil {
		old.halt()
	}
	select {
	case c.wake <- struct{}{}:
	default:
	}
	return g
}

// lose ends the current generation: the connection is gone.
func (c *Consumer) lose(err error) {
	c.mu.Lock()
	g := c.cur
	c.mu.Unlock()
	if g == nil || g.dead.Swap(true) {
		return
	}
	g.halt()
	c.st.Lost.Add(1)
	var reason any = "closed"
	if err != nil {
		reason = c.red.Error(err)
	}
	c.log.Warn("natsconsumer: connection lost; reconnecting", "generation", g.n, "err", reason)
}

// regain starts a generation on the reconnected connection.
func (c *Consumer) regain() {
	g := c.newGeneration()
	c.st.Reconnects.Add(1)
	c.metrics.Reconnects.Add(1)
	c.log.Info("natsconsumer: reconnected", "generation", g.n)
}

// current returns the current generation.
func (c *Consumer) current() *generation {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.cur
}

// pull asks the server for as many messages as there are free places
// (InFlight) and hands each to a goroutine, until ctx is done.
func (c *Consumer) pull(ctx, hctx context.Context, nc *nats.Conn, js jetstream.JetStream, cons jetstream.Consumer, workers *sync.WaitGroup) {
	failures := 0
	// retry follows a failed pull request: a durable consumer that is
	// gone (deleted by an operator, or lost with a server's memory
	// storage) is created again at once, its messages still in the
	// stream; any other failure waits ReconnectBackoff. The server says
	// "consumer deleted" only to pull requests waiting at the deletion; a
	// pull request sent after it goes unanswered, so an empty pull asks
	// whether the consumer still exists (exists).
	retry := func(what string, err error) {
		if errors.Is(err, jetstream.ErrConsumerDeleted) || errors.Is(err, jetstream.ErrConsumerNotFound) {
			c.log.Warn("natsconsumer: the durable consumer is gone; creating it again", "err", c.red.Error(err))
			if cc, err := c.setup(ctx, js); err == nil {
				cons = cc
				return
			}
		}
		failures++
		wait := c.cfg.ReconnectBackoff.Delay(failures - 1)
		c.log.Warn("natsconsumer: "+what, "err", c.red.Error(err), "next_wait", wait)
		consumerkit.Sleep(ctx, wait)
	}
	for ctx.Err() == nil {
		g := c.current()
		if g.stopped() {
			select {
			case <-c.wake:
			case <-ctx.Done():
			}
			continue
		}
		n := c.acquire(ctx, g.stop)
		if n == 0 {
			continue
		}
		batch, err := cons.Fetch(n, jetstream.FetchMaxWait(pullWait))
		if err != nil {
			c.release(n)
			retry("pull request failed", err)
			continue
		}
		got := 0
		for msg := range batch.Messages() {
			got++
			if g.stopped() || ctx.Err() != nil {
				// Received after its connection was lost or the stop
				// began: never processed, handed back at once (the Nak
				// reaches the server once the client has reconnected).
				c.st.Dropped.Add(1)
				c.settle(msg, func() error { return msg.Nak() })
				c.release(1)
				continue
			}
			actx := admission.With(hctx, c.gate, g.stop)
			workers.Add(1)
			go func() {
				defer workers.Done()
				defer c.release(1)
				c.handle(actx, g, nc, js, msg)
			}()
		}
		c.release(n - got)
		if err := batch.Error(); err != nil && ctx.Err() == nil && !g.stopped() {
			retry("pull request ended with an error", err)
			continue
		}
		if got == 0 && ctx.Err() == nil && !g.stopped() {
			// An empty pull: the stream is idle, or the durable consumer
			// was deleted between two pull requests, which the server
			// then leaves unanswered. Ask for it.
			if err := c.exists(ctx, cons); err != nil {
				retry("the durable consumer is gone", err)
				continue
			}
		}
		failures = 0
	}
}

// exists returns jetstream.ErrConsumerNotFound when cons is gone from the
// server, and nil otherwise (other failures show at the next pull).
func (c *Consumer) exists(ctx context.Context, cons jetstream.Consumer) error {
	ictx, cancel := context.WithTimeout(ctx, c.cfg.ConnectTimeout)
	defer cancel()
	if _, err := cons.Info(ictx); errors.Is(err, jetstream.ErrConsumerNotFound) {
		return err
	}
	return nil
}

// acquire takes at least one free place (waiting for it unless ctx ends
// or stop closes) and then every other free place; it returns how many.
func (c *Consumer) acquire(ctx context.Context, stop <-chan struct{}) int {
	select {
	case c.slots <- struct{}{}:
	case <-ctx.Done():
		return 0
	case <-stop:
		return 0
	}
	n := 1
	for {
		select {
		case c.slots <- struct{}{}:
			n++
		default:
			return n
		}
	}
}

func (c *Consumer) release(n int) {
	for range n {
		<-c.slots
	}
}

// settle sends an acknowledgement of some kind, counting a failure.
func (c *Consumer) settle(msg jetstream.Msg, send func() error) bool {
	if err := send(); err != nil {
		c.st.AckErrors.Add(1)
		c.log.Warn("natsconsumer: settling a delivery failed; the server delivers it again", "subject", msg.Subject(), "err", c.red.Error(err))
		return false
	}
	return true
}

// handle runs one delivery through the pipeline and settles it.
func (c *Consumer) handle(actx context.Context, g *generation, nc *nats.Conn, js jetstream.JetStream, msg jetstream.Msg) {
	meta, err := msg.Metadata()
	if err != nil {
		// Not a JetStream delivery: nothing to key it by. Hand it back.
		c.log.Error("natsconsumer: delivery without JetStream metadata; handed back", "subject", msg.Subject(), "err", err)
		c.st.Requeues.Add(1)
		c.settle(msg, func() error { return msg.NakWithDelay(c.cfg.Pipeline.Backoff.Max) })
		return
	}
	m := c.message(msg, meta)
	h := c.cfg.Handler
	if meta.NumDelivered > uint64(c.cfg.Pipeline.MaxAttempts) {
		// Delivered more often than attempts are allowed, with no failure
		// reported by the handler in between: the consumer died or lost
		// its connection each time (a crash loop). A duplicate of
		// finished work is still acknowledged by the pipeline; anything
		// else fails without running and is dead-lettered.
		n := meta.NumDelivered
		h = func(context.Context, *receiver.Message) error {
			return fmt.Errorf("%w: %d deliveries, MaxAttempts %d", ErrTooManyDeliveries, n, c.cfg.Pipeline.MaxAttempts)
		}
	}
	stopProgress := c.keepInProgress(msg)
	res := c.rcv.Process(actx, m, h)
	for handBacks := 0; res.Action == receiver.Requeue && !res.Ran && !errors.Is(res.Err, receiver.ErrAbandoned); handBacks++ {
		// Deferred without running: its key is in flight here or claimed
		// by another process (which may have crashed: its claim lapses),
		// or the store cannot answer. Kept and tried again in place, its
		// AckWait held off by InProgress, rather than handed back with
		// NakWithDelay: each redelivery would raise NumDelivered, which
		// the crash-loop guard counts, and a message that never ran
		// would be dead-lettered unrun once the claim lapsed. A stop or a
		// connection loss ends the wait, and the delivery is handed back.
		if !c.waitInPlace(actx, g, c.cfg.Pipeline.Backoff.Delay(handBacks)) {
			break
		}
		c.st.LocalRetries.Add(1)
		m = c.message(msg, meta)
		res = c.rcv.Process(actx, m, h)
	}
	stopProgress()
	switch {
	case res.Action == receiver.Requeue && !res.Ran && errors.Is(res.Err, receiver.ErrAbandoned):
		// Claimed ahead, never started: the connection was lost or the
		// stop began meanwhile. The pipeline rolled it back; hand it back.
		c.st.Dropped.Add(1)
		c.settle(msg, func() error { return msg.Nak() })
	case res.Action == receiver.Ack:
		if c.settle(msg, msg.Ack) {
			c.st.Acks.Add(1)
		}
	case res.Action == receiver.DeadLetter:
		c.deadLetter(actx, nc, js, msg, meta, m, res)
	default: // Requeue (and anything unknown: never acknowledge it)
		if c.settle(msg, func() error { return msg.NakWithDelay(res.RetryAfter) }) {
			c.st.Requeues.Add(1)
		}
	}
}

// waitInPlace waits d before a deferred delivery is tried again; it
// reports false when the generation stopped (a stop began, or the
// connection was lost) or ctx ended first.
func (c *Consumer) waitInPlace(ctx context.Context, g *generation, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return !g.stopped()
	case <-g.stop:
	case <-ctx.Done():
	}
	return false
}

// keepInProgress tells the server every AckWait/4 that msg is being
// worked on, until the returned function is called.
func (c *Consumer) keepInProgress(msg jetstream.Msg) (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(c.cfg.AckWait / 4)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				if err := msg.InProgress(); err != nil {
					c.log.Debug("natsconsumer: in-progress signal failed", "err", c.red.Error(err))
				}
			}
		}
	}()
	return func() { close(done); wg.Wait() }
}

// deadLetter publishes a record of msg to the dead-letter subject and
// waits for the dead-letter stream's PubAck, then terminates msg with a
// Term the server confirms. If the record is not acknowledged, msg is
// handed back (NakWithDelay): never lost.
func (c *Consumer) deadLetter(ctx context.Context, nc *nats.Conn, js jetstream.JetStream, msg jetstream.Msg, meta *jetstream.MsgMetadata, m *receiver.Message, res receiver.Result) {
	seq := strconv.FormatUint(meta.Sequence.Stream, 10)
	rec := nats.NewMsg(c.cfg.DeadLetterSubject)
	for k, vs := range msg.Headers() {
		if strings.HasPrefix(k, "Nats-") {
			// The server's own headers (Nats-Msg-Id, Nats-Expected-*,
			// Nats-Rollup, ...) would act on the dead-letter stream.
			continue
		}
		rec.Header[k] = append([]string(nil), vs...)
	}
	for k, v := range copyhdr.DeadLetter(nil, m.IdempotencyKey(), res.Reason, res.Attempt) {
		rec.Header.Set(k, v)
	}
	rec.Header.Set(HeaderOriginalStream, c.cfg.Stream)
	rec.Header.Set(HeaderOriginalSubject, msg.Subject())
	rec.Header.Set(HeaderOriginalSequence, seq)
	if id := msg.Headers().Get(jetstream.MsgIDHeader); id != "" {
		rec.Header.Set(HeaderOriginalMsgID, id)
	}
	if res.Err != nil {
		rec.Header.Set("x-dead-letter-error", truncate(res.Err.Error(), 1024))
	}
	// A record published twice (its Term lost, the message dead-lettered
	// again) is dropped by the dead-letter stream within its duplicate
	// window.
	rec.Header.Set(jetstream.MsgIDHeader, deadLetterID(c.cfg.Stream, c.cfg.Consumer, meta.Sequence.Stream))
	rec.Data = msg.Data()
	pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.cfg.ConnectTimeout)
	defer cancel()
	dl := c.dlStream.Load()
	var opts []jetstream.PublishOpt
	if dl != nil {
		// Stored only in the dead-letter stream: never in the consumed
		// stream, should an operator move the subject there while this
		// consumer runs.
		opts = append(opts, jetstream.WithExpectStream(*dl))
	}
	ack, err := js.PublishMsg(pctx, rec, opts...)
	if err == nil && dl != nil && ack.Stream != *dl {
		err = fmt.Errorf("the record was stored in the stream %q, not the dead-letter stream %q", ack.Stream, *dl)
	}
	if err != nil {
		c.st.DeadLetterErrors.Add(1)
		c.log.Error("natsconsumer: dead-letter publish failed; delivery handed back", "key", m.Key,
			"reason", res.Reason, "err", c.red.Error(err))
		c.settle(msg, func() error { return msg.NakWithDelay(c.cfg.Pipeline.Backoff.Max) })
		c.refreshDeadLetterStream(pctx, js)
		return
	}
	c.st.DeadLetters.Add(1)
	// The Term as a request the server answers: a Term lost on the way
	// would bring the message back to be dead-lettered again.
	if !c.settle(msg, func() error {
		_, err := nc.RequestWithContext(pctx, msg.Reply(), []byte("+TERM"))
		return err
	}) {
		c.log.Warn("natsconsumer: dead-letter record stored but its Term not confirmed; a redelivery is dead-lettered again", "key", m.Key)
	}
}

// refreshDeadLetterStream looks up the stream that captures the
// dead-letter subject again after a failed publish: an operator may have
// moved the subject to another stream.
func (c *Consumer) refreshDeadLetterStream(ctx context.Context, js jetstream.JetStream) {
	name, err := js.StreamNameBySubject(ctx, c.cfg.DeadLetterSubject)
	if err != nil {
		return
	}
	if err := c.checkLoop(nil, name); err != nil {
		c.log.Error("natsconsumer: dead letters cannot be stored", "err", err)
		return
	}
	c.dlStream.Store(&name)
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// message builds the receiver's view of a delivery: the key is
// deliveryKey's, the same on every redelivery.
func (c *Consumer) message(msg jetstream.Msg, meta *jetstream.MsgMetadata) *receiver.Message {
	hs := msg.Headers()
	m := &receiver.Message{
		Key:         deliveryKey(c.cfg.Stream, meta.Sequence.Stream, ""),
		Destination: keyjoin.Topic(c.cfg.Stream, c.cfg.Consumer),
		Consumer:    c.cfg.Consumer,
		Body:        msg.Data(),
		Redelivered: meta.NumDelivered > 1,
		Attempt:     int(min(meta.NumDelivered, uint64(1<<31-1))),
		Timestamp:   meta.Timestamp,
	}
	if len(hs) > 0 {
		m.Headers = make(map[string]string, len(hs))
		for k, vs := range hs {
			if len(vs) > 0 {
				m.Headers[k] = vs[0]
			}
		}
		m.Key = deliveryKey(c.cfg.Stream, meta.Sequence.Stream, hs.Get(jetstream.MsgIDHeader))
	}
	return m
}

// The domains of a delivery's key: a key the consumer derives from the
// stream sequence, and a key the publisher chose (its Nats-Msg-Id). Tagged
// apart (keyjoin.Tag), no Nats-Msg-Id spells the key of another message.
const (
	seqDomain = "seq"
	idDomain  = "id"
)

// deliveryKey is the key of the message at the stream sequence seq whose
// publisher set the Nats-Msg-Id msgID ("" for none): "id:<msgID>", else
// "seq:<stream>:<seq>".
func deliveryKey(stream string, seq uint64, msgID string) string {
	if msgID != "" {
		return keyjoin.Tag(idDomain, msgID)
	}
	return keyjoin.Tag(seqDomain, stream+":"+strconv.FormatUint(seq, 10))
}

// deadLetterID is the Nats-Msg-Id of the dead-letter record of the
// message at the stream sequence seq:
// "msgaudit-dlq:<stream>#<consumer>:<seq>", the stream and the consumer
// joined by keyjoin.Topic, so that two consumers sharing a dead-letter
// stream never give one id.
func deadLetterID(stream, consumer string, seq uint64) string {
	return "msgaudit-dlq:" + keyjoin.Topic(stream, consumer) + ":" + strconv.FormatUint(seq, 10)
}
