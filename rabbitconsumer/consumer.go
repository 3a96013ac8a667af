package rabbitconsumer

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/acemq/msgaudit/internal/admission"
	"github.com/acemq/msgaudit/internal/consumerkit"
	"github.com/acemq/msgaudit/internal/copyhdr"
	"github.com/acemq/msgaudit/internal/redact"
	"github.com/acemq/msgaudit/internal/tlsconf"
	"github.com/acemq/msgaudit/outbox"
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
	rcv     *receiver.Receiver
	gate    *admission.Gate // Concurrency: the handlers running at once, over every generation
	st      consumerkit.Counters

	guaranteeOnce sync.Once
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
	red := newRedactor(cfg.URL)
	log := cfg.Pipeline.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	log = slog.New(redact.NewHandler(log.Handler(), red)).With("queue", cfg.Queue)
	p := cfg.Pipeline
	p.Handlers = cfg.Concurrency
	p.Logger = log
	rcv, err := receiver.New(p)
	if err != nil {
		return nil, fmt.Errorf("%w: Pipeline: %w", ErrConfig, err)
	}
	return &Consumer{cfg: cfg, tls: tc, metrics: rcv.Metrics(), log: log, red: red, rcv: rcv,
		gate: admission.New(cfg.Concurrency)}, nil
}

// Metrics returns the pipeline's counters. Export them to Prometheus with
// promexport.Receiver(c.Metrics().Snapshot, "amqp"), and the transport's
// with promexport.Transport(c.Stats, "amqp").
func (c *Consumer) Metrics() *receiver.Metrics { return c.metrics }

// Stats returns the transport's counters. RabbitMQ keeps Connects,
// Reconnects, ConnectErrors, Lost, Acks, Requeues, DeadLetters (copies
// confirmed by the broker, their originals then acknowledged),
// DeadLetterErrors, Oversized (deliveries over MaxBodyBytes), Dropped,
// StaleAcks, AckErrors (Ack/Nack calls that failed) and Generation; the
// others stay zero.
func (c *Consumer) Stats() receiver.TransportStats { return c.st.Stats(c.gen.Load()) }

// Run consumes until ctx is cancelled, reconnecting whenever the
// connection or channel is lost. On cancellation it stops consuming, lets
// running handlers finish (Config.ShutdownTimeout), settles them and
// closes the connection, then returns nil. At start it keeps trying to
// connect until ctx is done unless Config.ConnectRetries bounds the
// attempts. It returns early with ErrConnect (no connection at start
// within the bound of Config.ConnectRetries, when set), ErrRejected (login
// or vhost refused), ErrTLS (certificate verification failed), ErrNoQueue
// (the queue does not exist, at start or at a reconnect), ErrDeclare
// (Config.Declare refused).
func (c *Consumer) Run(ctx context.Context) error {
	if !c.running.CompareAndSwap(false, true) {
		return ErrRunning
	}
	defer c.running.Store(false)
	rcv := c.rcv
	c.logGuarantee()

	// Handlers get a context that outlives ctx by ShutdownTimeout.
	hctx, hcancel := context.WithCancel(context.WithoutCancel(ctx))
	defer hcancel()

	// The outbox relay outlives ctx as the handlers do, and stops after them.
	if c.cfg.Outbox != nil {
		stopRelay := consumerkit.StartRelay(hctx, c.log, "rabbitconsumer", c.cfg.ReconnectBackoff,
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

	var workers sync.WaitGroup // workers of every generation
	defer workers.Wait()
	failures, connected, addr := 0, false, c.cfg.address()
	for ctx.Err() == nil {
		g, err := c.connect(ctx)
		if err != nil {
			if ctx.Err() != nil {
				break
			}
			if errors.Is(err, ErrRejected) || errors.Is(err, ErrTLS) || errors.Is(err, ErrNoQueue) || errors.Is(err, ErrDeclare) {
				return err
			}
			c.st.ConnectErrors.Add(1)
			failures++
			if !connected && c.cfg.ConnectRetries > 0 && failures > c.cfg.ConnectRetries {
				c.log.Warn("rabbitconsumer: connect failed; giving up", "address", addr, "attempt", failures, "err", err)
				return fmt.Errorf("%w: %s after %d attempts: %w", ErrConnect, redact.Strict(c.cfg.URL), failures, err)
			}
			wait := c.cfg.ReconnectBackoff.Delay(failures - 1)
			c.log.Warn("rabbitconsumer: connect failed; retrying", "address", addr, "attempt", failures, "err", err, "next_wait", wait)
			if !consumerkit.Sleep(ctx, wait) {
				break
			}
			continue
		}
		c.st.Connects.Add(1)
		if connected {
			c.st.Reconnects.Add(1)
			c.metrics.Reconnects.Add(1)
			c.log.Info("rabbitconsumer: reconnected", "generation", g.n)
		}
		connected, failures = true, 0
		if !c.serve(ctx, hctx, g, rcv, &workers) {
			break // graceful stop done
		}
		c.st.Lost.Add(1)
		if !consumerkit.Sleep(ctx, c.cfg.ReconnectBackoff.Delay(0)) {
			break
		}
	}
	return nil
}

// logGuarantee says once, at the first Run, what the duplicate detection
// survives.
func (c *Consumer) logGuarantee() {
	c.guaranteeOnce.Do(func() {
		consumerkit.LogGuarantee(c.log, "rabbitconsumer", c.cfg.Pipeline)
	})
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
	conn, err := dial(ctx, c.cfg, c.tls)
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
func (c *Consumer) classify(err error) error { return classify(err, c.cfg.URL, c.red) }

// classify maps an amqp091 error of a connection to url to ErrRejected /
// ErrTLS where retrying cannot help, and redacts it with red.
func classify(err error, url string, red redact.Redactor) error {
	var ae *amqp.Error
	if errors.As(err, &ae) && (ae.Code == amqp.AccessRefused || ae.Code == amqp.NotAllowed) {
		return red.Error(fmt.Errorf("%w: %s: %w", ErrRejected, redact.Strict(url), err))
	}
	if tlsconf.Permanent(err) {
		return red.Error(fmt.Errorf("%w: %s: %w", ErrTLS, redact.Strict(url), err))
	}
	return red.Error(err)
}

// dial opens an AMQP connection with the connection fields of cfg (URL,
// ConnectTimeout, Heartbeat, FrameSize, ConnectionName) and tc.
func dial(ctx context.Context, cfg Config, tc *tls.Config) (*amqp.Connection, error) {
	props := amqp.NewConnectionProperties()
	if cfg.ConnectionName != "" {
		props.SetClientConnectionName(cfg.ConnectionName)
	}
	acfg := amqp.Config{
		Heartbeat:  cfg.Heartbeat,
		FrameSize:  cfg.FrameSize,
		Locale:     "en_US",
		Properties: props,
		Dial: func(network, addr string) (net.Conn, error) {
			d := net.Dialer{Timeout: cfg.ConnectTimeout}
			conn, err := d.DialContext(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			// Bounds the TLS and AMQP handshakes; amqp091 clears the
			// deadline once the connection is open.
			_ = conn.SetDeadline(time.Now().Add(cfg.ConnectTimeout))
			return conn, nil
		},
	}
	if tc != nil {
		acfg.TLSClientConfig = tc.Clone() // amqp091 writes ServerName into it
	}
	return amqp.DialConfig(cfg.URL, acfg)
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
	actx := admission.With(hctx, c.gate, g.stop)
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
		c.st.Dropped.Add(1)
		if !g.dead.Load() {
			g.acks.requeue(d.DeliveryTag)
		}
		return
	}
	var res receiver.Result
	if len(d.Body) > c.cfg.MaxBodyBytes {
		c.st.Oversized.Add(1)
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
		c.st.Dropped.Add(1)
		if !g.dead.Load() {
			g.acks.requeue(d.DeliveryTag)
		}
	case res.Action == receiver.Ack:
		if g.dead.Load() {
			c.st.StaleAcks.Add(1)
		} else {
			g.acks.ack(d.DeliveryTag)
		}
	case res.Action == receiver.DeadLetter:
		c.deadLetter(hctx, g, d, m, res)
	default: // Requeue (and anything unknown: never acknowledge it)
		if !g.stopping.Load() {
			wait := res.RetryAfter
			t := time.NewTimer(wait)
			select {
			case <-t.C:
			case <-g.stop:
			}
			t.Stop()
		}
		if g.acks.requeue(d.DeliveryTag) {
			c.st.Requeues.Add(1)
		}
	}
}

// deadLetter publishes a copy with the reason (waiting for the broker's
// confirm), then acknowledges the original. If the copy cannot be
// published the original is handed back: never lost.
func (c *Consumer) deadLetter(ctx context.Context, g *generation, d amqp.Delivery, m *receiver.Message, res receiver.Result) {
	if g.dead.Load() {
		c.st.StaleAcks.Add(1)
		return
	}
	h := amqp.Table{}
	for k, v := range d.Headers {
		h[k] = v
	}
	h[copyhdr.DeadLetterReason] = res.Reason
	h[copyhdr.Attempts] = int64(res.Attempt)
	h[HeaderOriginalQueue] = c.cfg.Queue
	delete(h, copyhdr.OriginalKey) // a producer's value never passes on as the consumer's
	if k := m.IdempotencyKey(); k != "" {
		h[copyhdr.OriginalKey] = k
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
		c.st.DeadLetterErrors.Add(1)
		c.log.Error("rabbitconsumer: dead-letter publish failed; delivery handed back", "key", m.Key,
			"reason", res.Reason, "err", c.red.Error(err))
		g.acks.requeue(d.DeliveryTag)
		return
	}
	c.st.DeadLetters.Add(1)
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
