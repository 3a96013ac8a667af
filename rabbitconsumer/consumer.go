package rabbitconsumer

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/acemq/msgaudit/idempotency"
	"github.com/acemq/msgaudit/internal/redact"
	"github.com/acemq/msgaudit/internal/tlsconf"
	"github.com/acemq/msgaudit/receiver"
	amqp "github.com/rabbitmq/amqp091-go"
)

// Consumer consumes one RabbitMQ queue through the duplicate pipeline of
// package receiver. Create it with New and start it with Run.
type Consumer struct {
	cfg     Config
	tls     *tls.Config
	metrics *receiver.Metrics
	log     *slog.Logger
	red     redact.Redactor
	running atomic.Bool
	gen     atomic.Uint64
	rcv     atomic.Pointer[receiver.Receiver]
	gate    *receiver.Gate // Concurrency: the handlers running at once, over every generation
	st      stats

	guaranteeOnce sync.Once
}

type stats struct {
	connects, reconnects, connectErrors            atomic.Uint64
	acks, requeues, deadLetters, deadLetterErrors  atomic.Uint64
	oversized, dropped, staleAcks, ackErrors, lost atomic.Uint64
}

// Stats is a snapshot of the transport's counters. The duplicate
// pipeline's counters (delivered, processed, duplicates by tier, handler
// errors, store latency) are in Consumer.Metrics.
type Stats struct {
	// Connects counts successful connections (the first included),
	// Reconnects those after a loss, ConnectErrors failed attempts, Lost
	// connections or channels that broke while consuming.
	Connects, Reconnects, ConnectErrors, Lost uint64
	// Acks counts deliveries acknowledged (processed work and absorbed
	// duplicates); Requeues deliveries handed back with
	// Nack(requeue=true).
	Acks, Requeues uint64
	// DeadLetters counts dead-lettered copies confirmed by the broker
	// (their originals then acknowledged); DeadLetterErrors publishes that
	// failed (the original was handed back instead).
	DeadLetters, DeadLetterErrors uint64
	// Oversized counts deliveries over MaxBodyBytes (dead-lettered
	// unhandled).
	Oversized uint64
	// Dropped counts deliveries received but never processed because their
	// channel died or the consumer stopped; the broker delivers them again.
	Dropped uint64
	// StaleAcks counts settlements not sent because the delivery's channel
	// had died (its delivery tag means nothing on another channel).
	StaleAcks uint64
	// AckErrors counts Ack/Nack calls that failed.
	AckErrors uint64
	// Generation is the number of the current (or last) connection.
	Generation uint64
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
	red := newRedactor(cfg.URL, cfg.StoreURL)
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	log = slog.New(redact.NewHandler(log.Handler(), red)).With("queue", cfg.Queue)
	m := cfg.Metrics
	if cfg.Receiver != nil {
		m = cfg.Receiver.Metrics()
	}
	if m == nil {
		m = new(receiver.Metrics)
	}
	return &Consumer{cfg: cfg, tls: tc, metrics: m, log: log, red: red, gate: receiver.NewGate(cfg.Concurrency)}, nil
}

// Metrics returns the pipeline's counters (shared with the Receiver).
// Export them to Prometheus with
// promexport.Receiver(c.Metrics().Snapshot, "amqp").
func (c *Consumer) Metrics() *receiver.Metrics { return c.metrics }

// Receiver returns the duplicate pipeline of the current or last Run (nil
// before the first Run unless Config.Receiver was set).
func (c *Consumer) Receiver() *receiver.Receiver {
	if c.cfg.Receiver != nil {
		return c.cfg.Receiver
	}
	return c.rcv.Load()
}

// Config returns the configuration with defaults filled in.
func (c *Consumer) Config() Config { return c.cfg }

// Stats returns the transport's counters.
func (c *Consumer) Stats() Stats {
	return Stats{
		Connects: c.st.connects.Load(), Reconnects: c.st.reconnects.Load(),
		ConnectErrors: c.st.connectErrors.Load(), Lost: c.st.lost.Load(),
		Acks: c.st.acks.Load(), Requeues: c.st.requeues.Load(),
		DeadLetters: c.st.deadLetters.Load(), DeadLetterErrors: c.st.deadLetterErrors.Load(),
		Oversized: c.st.oversized.Load(), Dropped: c.st.dropped.Load(),
		StaleAcks: c.st.staleAcks.Load(), AckErrors: c.st.ackErrors.Load(),
		Generation: c.gen.Load(),
	}
}

// Run consumes until ctx is cancelled, reconnecting whenever the
// connection or channel is lost. On cancellation it stops consuming, lets
// running handlers finish (Config.ShutdownTimeout), settles them and
// closes the connection, then returns nil. It returns early with
// ErrConnect (no connection at start within Config.ConnectRetries
// attempts), ErrRejected (login or vhost refused), ErrTLS (certificate
// verification failed), ErrNoQueue (the queue does not exist, at start or
// at a reconnect), ErrDeclare (Config.Declare refused) or an error opening
// the store.
func (c *Consumer) Run(ctx context.Context) error {
	if !c.running.CompareAndSwap(false, true) {
		return ErrRunning
	}
	defer c.running.Store(false)
	rcv, closeStore, err := c.buildReceiver(ctx)
	if err != nil {
		return err
	}
	defer closeStore()

	// Handlers get a context that outlives ctx by ShutdownTimeout.
	hctx, hcancel := context.WithCancel(context.WithoutCancel(ctx))
	defer hcancel()
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

	var workers sync.WaitGroup // workers of every generation
	defer workers.Wait()
	failures, connected := 0, false
	for ctx.Err() == nil {
		g, err := c.connect(ctx)
		if err != nil {
			if ctx.Err() != nil {
				break
			}
			if errors.Is(err, ErrRejected) || errors.Is(err, ErrTLS) || errors.Is(err, ErrNoQueue) || errors.Is(err, ErrDeclare) {
				return err
			}
			c.st.connectErrors.Add(1)
			failures++
			if !connected && c.cfg.ConnectRetries > 0 && failures >= c.cfg.ConnectRetries {
				return fmt.Errorf("%w: %s after %d attempts: %w", ErrConnect, redact.Strict(c.cfg.URL), failures, err)
			}
			c.log.Warn("rabbitconsumer: connect failed", "attempt", failures, "err", err)
			if !sleep(ctx, c.cfg.ReconnectBackoff.delay(failures-1)) {
				break
			}
			continue
		}
		c.st.connects.Add(1)
		if connected {
			c.st.reconnects.Add(1)
			c.metrics.Reconnects.Add(1)
			c.log.Info("rabbitconsumer: reconnected", "generation", g.n)
		}
		connected, failures = true, 0
		if !c.serve(ctx, hctx, g, rcv, &workers) {
			break // graceful stop done
		}
		c.st.lost.Add(1)
		if !sleep(ctx, c.cfg.ReconnectBackoff.delay(0)) {
			break
		}
	}
	return nil
}

// buildReceiver returns the pipeline for one Run and a function closing
// what it opened.
func (c *Consumer) buildReceiver(ctx context.Context) (*receiver.Receiver, func(), error) {
	if c.cfg.Receiver != nil {
		return c.cfg.Receiver, func() {}, nil
	}
	store, closeStore := c.cfg.Store, func() {}
	if store == nil && c.cfg.StoreURL != "" {
		s, err := openStore(ctx, c.cfg.StoreURL, c.log)
		if err != nil {
			return nil, nil, c.red.Error(err)
		}
		store, closeStore = s, func() { s.Close() }
	}
	var selectors []receiver.Selector
	if c.cfg.Inbox != nil {
		selectors = []receiver.Selector{c.cfg.Inbox}
	}
	c.guaranteeOnce.Do(func() {
		switch {
		case c.cfg.Inbox != nil:
			c.log.Info("rabbitconsumer: transactional inbox: each delivery's key commits in the handler's own transaction, so a crash between effect and acknowledgement never applies a message twice",
				"inbox", fmt.Sprintf("%T", c.cfg.Inbox))
		case store == nil:
			c.log.Warn("rabbitconsumer: memory-only duplicate detection (Config.MemoryOnly): duplicates are absorbed while this process runs, across reconnects; after a restart, or on another consumer, a redelivery of finished work is applied again")
		default:
			c.log.Info("rabbitconsumer: durable duplicate detection: finished work is recognised across restarts and by every consumer sharing the store; a crash between the handler's effect and the store's confirm can apply a message again once its claim lapses",
				"store", fmt.Sprintf("%T", store))
		}
	})
	r, err := receiver.New(receiver.Config{
		Audit: c.cfg.Audit, Store: store, Namespace: c.cfg.Namespace, Selectors: selectors,
		MaxAttempts: c.cfg.MaxAttempts, Backoff: c.cfg.Backoff,
		Duplicates: c.cfg.DuplicatePolicy, OnDuplicate: c.cfg.OnDuplicate, MissingKey: c.cfg.MissingKey,
		Handlers: c.cfg.Concurrency, Metrics: c.metrics, Logger: c.log,
	})
	if err != nil {
		closeStore()
		return nil, nil, err
	}
	c.rcv.Store(r)
	return r, closeStore, nil
}

// openStore opens an idempotency store from a URL with idempotency.Open
// (whose backend the program imports):
// redis:// and rediss:// (Fency's default), postgres://, sqlite:PATH or
// memory. The store logs through log what it says once at open (the
// effective PostgreSQL TLS mode, a disabled Redis certificate check).
func openStore(ctx context.Context, rawURL string, log *slog.Logger) (idempotency.Store, error) {
	return idempotency.Open(ctx, rawURL, idempotency.Options{Logger: log})
}

// generation is one connection with its consuming channel and its
// confirm-mode publishing channel. Delivery tags are valid only on the
// channel that delivered them, so once a generation is dead nothing of it
// is acknowledged.
type generation struct {
	n    uint64
	conn *amqp.Connection
	ch   *amqp.Channel
	acks *acker // settles on ch (or on a fake in tests)
	pub  publisher
	tag  string
	// deliveries is closed by amqp091 when the channel closes (dropping
	// what it buffered) or after a cancel (delivering what it buffered).
	// recv serializes receiving with registering the delivery's tag in
	// acks, so tags are registered in delivery order.
	deliveries <-chan amqp.Delivery
	recv       sync.Mutex
	dead       atomic.Bool   // the channel or connection is gone
	stopping   atomic.Bool   // graceful stop: start nothing new
	stop       chan struct{} // closed when dead or stopping
	stopOnce   sync.Once
}

func (g *generation) halt() { g.stopOnce.Do(func() { close(g.stop) }) }

// next receives the next delivery and registers its tag with the acker.
func (g *generation) next() (amqp.Delivery, bool) {
	g.recv.Lock()
	defer g.recv.Unlock()
	d, ok := <-g.deliveries
	if ok {
		g.acks.add(d.DeliveryTag)
	}
	return d, ok
}

// publisher publishes a message and waits for the broker's confirm.
type publisher interface {
	publish(ctx context.Context, exchange, key string, msg amqp.Publishing) error
}

type confirmPublisher struct{ ch *amqp.Channel }

func (p confirmPublisher) publish(ctx context.Context, exchange, key string, msg amqp.Publishing) error {
	dc, err := p.ch.PublishWithDeferredConfirmWithContext(ctx, exchange, key, false, false, msg)
	if err != nil {
		return err
	}
	ok, err := dc.WaitContext(ctx)
	if err != nil {
		return err
	}
	if !ok {
		return errors.New("broker nacked the publish")
	}
	return nil
}

// connect dials, opens the channels and starts consuming.
func (c *Consumer) connect(ctx context.Context) (g *generation, err error) {
	props := amqp.NewConnectionProperties()
	if c.cfg.ConnectionName != "" {
		props.SetClientConnectionName(c.cfg.ConnectionName)
	}
	acfg := amqp.Config{
		Heartbeat:  c.cfg.Heartbeat,
		FrameSize:  c.cfg.FrameSize,
		Locale:     "en_US",
		Properties: props,
		Dial: func(network, addr string) (net.Conn, error) {
			d := net.Dialer{Timeout: c.cfg.ConnectTimeout}
			conn, err := d.DialContext(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			// Bounds the TLS and AMQP handshakes; amqp091 clears the
			// deadline once the connection is open.
			_ = conn.SetDeadline(time.Now().Add(c.cfg.ConnectTimeout))
			return conn, nil
		},
	}
	if c.tls != nil {
		acfg.TLSClientConfig = c.tls.Clone() // amqp091 writes ServerName into it
	}
	conn, err := amqp.DialConfig(c.cfg.URL, acfg)
	if err != nil {
		return nil, c.classify(err)
	}
	defer func() {
		if err != nil {
			conn.Close()
		}
	}()
	ch, err := conn.Channel()
	if err != nil {
		return nil, c.classify(err)
	}
	if err := ch.Qos(c.cfg.Prefetch, 0, false); err != nil {
		return nil, c.classify(err)
	}
	if c.cfg.Declare {
		if _, err := ch.QueueDeclare(c.cfg.Queue, true, false, false, false, c.cfg.QueueArguments); err != nil {
			return nil, c.queueErr(err, ErrDeclare)
		}
	} else if _, err := ch.QueueDeclarePassive(c.cfg.Queue, true, false, false, false, nil); err != nil {
		// Checked before the dead-letter queue is declared, so that a
		// mistyped name leaves nothing behind.
		return nil, c.queueErr(err, nil)
	}
	if c.cfg.DeadLetterExchange == "" {
		if _, err := ch.QueueDeclare(c.cfg.DeadLetterQueue, true, false, false, false, nil); err != nil {
			return nil, fmt.Errorf("declare dead-letter queue %q: %w", c.cfg.DeadLetterQueue, c.classify(err))
		}
	}
	pub, err := conn.Channel()
	if err != nil {
		return nil, c.classify(err)
	}
	if err := pub.Confirm(false); err != nil {
		return nil, c.classify(err)
	}
	n := c.gen.Add(1)
	g = &generation{n: n, conn: conn, ch: ch, pub: confirmPublisher{pub},
		tag: c.cfg.ConsumerTag + "-" + strconv.FormatUint(n, 10), stop: make(chan struct{})}
	g.acks = newAcker(ch, &g.dead, &c.st, c.log, c.cfg.Prefetch)
	g.deliveries, err = ch.Consume(c.cfg.Queue, g.tag, false, false, false, false, nil)
	if err != nil {
		return nil, c.queueErr(err, nil)
	}
	return g, nil
}

// queueErr describes a failure to declare (declare = ErrDeclare) or
// consume Config.Queue: a missing queue wraps ErrNoQueue, a refused
// declaration ErrDeclare, anything else is classified as a connection
// problem.
func (c *Consumer) queueErr(err error, declare error) error {
	var ae *amqp.Error
	if errors.As(err, &ae) {
		switch {
		case ae.Code == amqp.NotFound:
			return c.red.Error(&noQueueError{fmt.Sprintf("rabbitconsumer: queue %q does not exist on %s; declare it, or set Config.Declare to have the consumer declare it (broker: %s)",
				c.cfg.Queue, redact.Strict(c.cfg.URL), ae.Reason)})
		case declare != nil && (ae.Code == amqp.PreconditionFailed || ae.Code == amqp.AccessRefused):
			return c.red.Error(fmt.Errorf("%w %q (broker: %s)", declare, c.cfg.Queue, ae.Reason))
		}
	}
	if declare != nil {
		return fmt.Errorf("declare queue %q: %w", c.cfg.Queue, c.classify(err))
	}
	return fmt.Errorf("consume %q: %w", c.cfg.Queue, c.classify(err))
}

// noQueueError is ErrNoQueue with the queue named in one sentence.
type noQueueError struct{ msg string }

func (e *noQueueError) Error() string        { return e.msg }
func (e *noQueueError) Is(target error) bool { return target == ErrNoQueue }

// classify maps an amqp091 error to ErrRejected / ErrTLS where retrying
// cannot help, and redacts it.
func (c *Consumer) classify(err error) error {
	var ae *amqp.Error
	if errors.As(err, &ae) && (ae.Code == amqp.AccessRefused || ae.Code == amqp.NotAllowed) {
		return c.red.Error(fmt.Errorf("%w: %s: %w", ErrRejected, redact.Strict(c.cfg.URL), err))
	}
	if tlsconf.Permanent(err) {
		return c.red.Error(fmt.Errorf("%w: %s: %w", ErrTLS, redact.Strict(c.cfg.URL), err))
	}
	return c.red.Error(err)
}

// serve consumes on g until ctx is done (graceful stop: returns false) or
// the connection or a channel is lost (returns true; its handlers finish
// in the background).
func (c *Consumer) serve(ctx, hctx context.Context, g *generation, rcv *receiver.Receiver, all *sync.WaitGroup) (lost bool) {
	connClosed := g.conn.NotifyClose(make(chan *amqp.Error, 1))
	chClosed := g.ch.NotifyClose(make(chan *amqp.Error, 1))
	// InFlight deliveries go through the pipeline at once, Concurrency
	// handlers run at once (the gate); those claimed ahead of a handler
	// are abandoned when g stops.
	actx := receiver.WithAdmission(hctx, c.gate, g.stop)
	var gw sync.WaitGroup
	for range c.cfg.InFlight {
		gw.Add(1)
		all.Add(1)
		go func() {
			defer all.Done()
			defer gw.Done()
			for {
				d, ok := g.next()
				if !ok {
					return
				}
				c.handle(actx, g, rcv, d)
			}
		}()
	}
	select {
	case e := <-connClosed:
		c.die(g, "connection", e)
		return true
	case e := <-chClosed:
		c.die(g, "channel", e)
		return true
	case <-ctx.Done():
	}
	// Graceful stop: no new deliveries; handlers finish and settle.
	g.stopping.Store(true)
	g.halt()
	if err := g.ch.Cancel(g.tag, false); err != nil {
		c.log.Debug("rabbitconsumer: cancel", "err", err)
	}
	done := make(chan struct{})
	go func() { gw.Wait(); close(done) }()
	select {
	case <-done:
	case <-connClosed:
		g.dead.Store(true)
	case <-chClosed:
		g.dead.Store(true)
	}
	<-done
	g.dead.Store(true)
	g.conn.Close() // unacknowledged deliveries go back to the queue
	return false
}

// die marks g dead: its delivery tags are void from now on.
func (c *Consumer) die(g *generation, what string, e *amqp.Error) {
	g.dead.Store(true)
	g.halt()
	g.conn.Close()
	var reason any = "closed"
	if e != nil {
		reason = c.red.Error(e)
	}
	c.log.Warn("rabbitconsumer: "+what+" lost; reconnecting", "generation", g.n, "err", reason)
}

// handle runs one delivery through the pipeline and settles it on g.
func (c *Consumer) handle(hctx context.Context, g *generation, rcv *receiver.Receiver, d amqp.Delivery) {
	m := c.message(d)
	if g.dead.Load() || g.stopping.Load() {
		// Never processed: its audit bit (if any) goes, and the broker
		// delivers it again. On a live channel hand it back now.
		rcv.Forget(m)
		c.st.dropped.Add(1)
		if !g.dead.Load() {
			g.acks.requeue(d.DeliveryTag)
		}
		return
	}
	var res receiver.Result
	if len(d.Body) > c.cfg.MaxBodyBytes {
		c.st.oversized.Add(1)
		res = receiver.Result{Action: receiver.DeadLetter, Err: ErrBodyTooLarge, Attempt: max(m.Attempt, 1),
			Reason: fmt.Sprintf("body-too-large: %d bytes, limit %d", len(d.Body), c.cfg.MaxBodyBytes)}
		c.log.Warn("rabbitconsumer: body over MaxBodyBytes; dead-lettered unhandled", "key", m.Key, "bytes", len(d.Body))
	} else {
		res = rcv.Process(hctx, m, c.cfg.Handler)
	}
	switch {
	case res.Action == receiver.Requeue && !res.Ran && errors.Is(res.Err, receiver.ErrAbandoned):
		// Claimed ahead, never started: g stopped or died meanwhile. The
		// pipeline has rolled it back; hand it back on a live channel.
		c.st.dropped.Add(1)
		if !g.dead.Load() {
			g.acks.requeue(d.DeliveryTag)
		}
	case res.Action == receiver.Ack:
		if g.dead.Load() {
			c.st.staleAcks.Add(1)
		} else {
			g.acks.ack(d.DeliveryTag)
		}
	case res.Action == receiver.DeadLetter:
		c.deadLetter(hctx, g, d, m, res)
	default: // Requeue (and anything unknown: never acknowledge it)
		if !g.stopping.Load() {
			wait := min(res.RetryAfter, c.cfg.MaxRequeueDelay)
			t := time.NewTimer(wait)
			select {
			case <-t.C:
			case <-g.stop:
			}
			t.Stop()
		}
		if g.acks.requeue(d.DeliveryTag) {
			c.st.requeues.Add(1)
		}
	}
}

// deadLetter publishes a copy with the reason (waiting for the broker's
// confirm), then acknowledges the original. If the copy cannot be
// published the original is handed back: never lost.
func (c *Consumer) deadLetter(ctx context.Context, g *generation, d amqp.Delivery, m *receiver.Message, res receiver.Result) {
	if g.dead.Load() {
		c.st.staleAcks.Add(1)
		return
	}
	h := amqp.Table{}
	for k, v := range d.Headers {
		h[k] = v
	}
	h[receiver.HeaderDeadLetterReason] = res.Reason
	h[receiver.HeaderAttempts] = int64(res.Attempt)
	h[HeaderOriginalQueue] = c.cfg.Queue
	if k := m.IdempotencyKey(); k != "" {
		h[receiver.HeaderOriginalKey] = k
	}
	if res.Err != nil {
		h["x-dead-letter-error"] = truncate(res.Err.Error(), 1024)
	}
	pub := amqp.Publishing{
		Headers: h, ContentType: d.ContentType, ContentEncoding: d.ContentEncoding,
		DeliveryMode: amqp.Persistent, Priority: d.Priority, CorrelationId: d.CorrelationId,
		ReplyTo: d.ReplyTo, MessageId: d.MessageId, Timestamp: d.Timestamp, Type: d.Type,
		AppId: d.AppId, Body: d.Body,
	}
	pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.cfg.ConnectTimeout)
	defer cancel()
	if err := g.pub.publish(pctx, c.cfg.DeadLetterExchange, c.cfg.DeadLetterRoutingKey, pub); err != nil {
		c.st.deadLetterErrors.Add(1)
		c.log.Error("rabbitconsumer: dead-letter publish failed; delivery handed back", "key", m.Key,
			"reason", res.Reason, "err", c.red.Error(err))
		g.acks.requeue(d.DeliveryTag)
		return
	}
	c.st.deadLetters.Add(1)
	g.acks.ackOne(d.DeliveryTag)
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// message builds the receiver's view of a delivery: Fency's key (the AMQP
// message id; the namespace is the queue) or the KeyHeader.
func (c *Consumer) message(d amqp.Delivery) *receiver.Message {
	m := &receiver.Message{
		Key:         d.MessageId,
		Destination: c.cfg.Queue,
		Consumer:    c.cfg.ConsumerTag,
		Headers:     headers(d.Headers),
		Body:        d.Body,
		Redelivered: d.Redelivered,
		Timestamp:   d.Timestamp,
	}
	if m.Key == "" && c.cfg.KeyHeader != "" {
		m.Key = m.Headers[c.cfg.KeyHeader]
	}
	if n, ok := deliveryCount(d.Headers[HeaderDeliveryCount]); ok {
		m.Attempt = n + 1
	}
	return m
}

// headers flattens an AMQP table to strings.
func headers(t amqp.Table) map[string]string {
	if len(t) == 0 {
		return nil
	}
	h := make(map[string]string, len(t))
	for k, v := range t {
		h[k] = headerString(v)
	}
	return h
}

func headerString(v any) string {
	switch x := v.(type) {
	case nil:
		return ""
	case string:
		return x
	case []byte:
		return string(x)
	case time.Time:
		return x.UTC().Format(time.RFC3339Nano)
	case bool:
		return strconv.FormatBool(x)
	case int8, int16, int32, int64, int, uint8, uint16, uint32, uint64, uint:
		return fmt.Sprint(x)
	case float32:
		return strconv.FormatFloat(float64(x), 'g', -1, 32)
	case float64:
		return strconv.FormatFloat(x, 'g', -1, 64)
	}
	return fmt.Sprint(v)
}

func deliveryCount(v any) (int, bool) {
	switch x := v.(type) {
	case int64:
		return int(x), x >= 0
	case int32:
		return int(x), x >= 0
	case int:
		return x, x >= 0
	case int16:
		return int(x), x >= 0
	}
	return 0, false
}

// sleep waits d or until ctx is done; it reports whether d elapsed.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

func rand64n(n int64) int64 {
	if n <= 0 {
		return 0
	}
	return rand.Int64N(n)
}
