package rabbitconsumer

import (
	"crypto/tls"
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/acemq/msgaudit/internal/consumerkit"
	"github.com/acemq/msgaudit/internal/redact"
	"github.com/acemq/msgaudit/internal/tlsconf"
	"github.com/acemq/msgaudit/outbox"
	"github.com/acemq/msgaudit/receiver"
	amqp "github.com/rabbitmq/amqp091-go"
)

// Defaults for the zero fields of Config (each field's documentation
// says its default).
const (
	defaultPrefetch         = 50
	defaultConcurrency      = 1
	defaultConnectTimeout   = 10 * time.Second
	defaultHeartbeat        = 10 * time.Second
	defaultShutdownTimeout  = 30 * time.Second
	defaultFrameSize        = 128 << 10 // RabbitMQ's own frame_max default
	defaultMaxBodyBytes     = 16 << 20
	defaultMaxRequeueDelay  = 5 * time.Second
	defaultDeadLetterSuffix = ".dlq"
)

// Headers this package writes on a dead-lettered copy, besides
// "x-dead-letter-reason" (Result.Reason), "x-attempts" (Result.Attempt)
// and "x-original-key" (the delivery's idempotency key).
const (
	// HeaderOriginalQueue names the queue the message was consumed from.
	HeaderOriginalQueue = "x-original-queue"
	// HeaderDeliveryCount is the delivery counter quorum queues set; the
	// consumer reads it as the attempt number.
	HeaderDeliveryCount = "x-delivery-count"
)

// Config configures a Consumer. The zero value of every field means its
// default; URL, Queue and Handler are required, and so is the choice of
// durability in Pipeline: a Store, an Inbox, or MemoryOnly.
//
// Config implements fmt.Formatter and String: printing it with any verb
// redacts the password of URL.
type Config struct {
	// URL is the broker: "amqp://user:pass@host:5672/vhost" or "amqps://…"
	// (TLS). The password is never logged and never appears in an error.
	URL string

	// TLS is the client TLS configuration for amqps:// (cloned per
	// connection). CAFile, CertFile/KeyFile and ServerName, when set, are
	// applied on top of it (or of a default config); ServerName defaults to
	// the URL's host. Setting any of them with an amqp:// URL is an error.
	TLS                                   *tls.Config
	CAFile, CertFile, KeyFile, ServerName string

	// Queue is consumed with manual acknowledgements. Unless Declare is
	// set the consumer does not declare it: it must exist, and a missing
	// queue makes Run return an error wrapping ErrNoQueue (not retried).
	Queue string

	// Declare makes the consumer declare Queue on every connection, durable
	// (not exclusive, not auto-deleted), with QueueArguments (for example
	// amqp.Table{"x-queue-type": "quorum"}). Declaring an existing queue
	// with other arguments is refused by the broker: Run returns an error
	// wrapping ErrDeclare (not retried).
	Declare        bool
	QueueArguments amqp.Table

	// Handler processes each message, wrapped in the duplicate pipeline.
	Handler receiver.Handler

	// Prefetch is the channel's QoS prefetch count: how many
	// unacknowledged deliveries the broker sends ahead; default 50.
	Prefetch int

	// Concurrency is the number of handlers running at once; default 1.
	Concurrency int

	// InFlight is the number of deliveries that go through the duplicate
	// pipeline at once: up to InFlight deliveries are claimed in the store
	// (or the inbox) ahead while at most Concurrency handlers run, and the
	// confirms of finished handlers do not hold a handler's place, so a
	// store that groups concurrent calls (idempotency.Group) claims and
	// confirms a prefetch window in few round trips. Default: Prefetch (or
	// Concurrency, if larger) when Concurrency is above 1, and 1 when
	// Concurrency is 1, which keeps the handlers in the queue's delivery
	// order. A value below Concurrency, or above both Prefetch and
	// Concurrency, is an error from New. With InFlight above 1 and
	// Concurrency 1 the handlers still run one at a time, but not strictly
	// in delivery order.
	InFlight int

	// ReconnectBackoff spaces reconnect attempts; its zero fields mean
	// 100ms doubling to 10s, with full jitter. (The delay before a failed
	// delivery is handed back is Pipeline.Backoff.)
	ReconnectBackoff receiver.Backoff

	// ConnectRetries bounds the start. By default (zero or negative) Run
	// keeps trying to connect until ctx is done, with ReconnectBackoff
	// between attempts: a consumer started while the broker restarts
	// connects once it is back. With n > 0, Run returns ErrConnect when
	// the first attempt and n retries have failed. Each failed attempt is
	// logged at warn level with the broker's address, the attempt's
	// number, the error and the wait before the next one. A refused login
	// or vhost (ErrRejected), a certificate that fails verification
	// (ErrTLS), a missing queue (ErrNoQueue) and a refused declaration
	// (ErrDeclare) end Run at once either way. After the first connection
	// the consumer reconnects until ctx is done, whatever ConnectRetries
	// is. ConnectTimeout bounds the dial and handshake of one attempt;
	// default 10s.
	ConnectRetries int
	ConnectTimeout time.Duration

	// Heartbeat is the AMQP heartbeat interval; default 10s.
	Heartbeat time.Duration

	// FrameSize is the largest AMQP frame the client accepts
	// (amqp.Config.FrameSize, negotiated down to the broker's frame_max);
	// default 128 KiB. It bounds a message's header block (properties and
	// headers travel in one frame). MaxBodyBytes bounds the body; default
	// 16 MiB. amqp091-go has no body limit of its own, so an oversized body
	// has been read when the check runs: it is dead-lettered unhandled (see
	// the package documentation); the broker-side bound is RabbitMQ's
	// max_message_size.
	FrameSize, MaxBodyBytes int

	// ShutdownTimeout is how long a graceful stop lets running handlers
	// finish after Run's context is cancelled before their context is
	// cancelled too; default 30s.
	ShutdownTimeout time.Duration

	// ConsumerTag prefixes the consumer tag of each connection; default
	// "msgaudit". ConnectionName is shown in the management UI.
	ConsumerTag, ConnectionName string

	// Pipeline configures the duplicate pipeline the consumer builds (with
	// receiver.New) and owns. Durability is required there: Store (an
	// idempotency store shared by competing consumers and surviving
	// restarts, for example idempotency.Open of a "redis://…" URL, Fency's
	// default), Inbox (a transactional inbox: Handler gets its transaction
	// through inbox.Handler or pgxinbox.Handler) or MemoryOnly: true
	// (duplicates absorbed only while this process runs; Run logs this
	// guarantee once at start). Its Namespace defaults to the queue name,
	// which makes the key Fency's (queue name, message id); an Audit is
	// useful only when producers use "<producer>:<sequence>" ids (package
	// msgid), as AMQP message ids are usually UUIDs. Logger receives the
	// consumer's logs too (nil discards them), with the URL's password
	// redacted. The consumer fills in Handlers (Concurrency) and the zero
	// fields of Backoff, which gives the delay before a failed delivery is
	// handed back with Nack(requeue=true) (RabbitMQ requeues it at once, so
	// the delay is what spaces the retries; during it the delivery keeps
	// its prefetch slot): 100ms doubling to 5s, with full jitter. Its
	// invalid settings are errors from New.
	Pipeline receiver.Config

	// Outbox, when set, makes Run run its relay (outbox.Outbox.Run) beside
	// the handlers: it publishes what they sent with Outbox.Send, once
	// committed, on a connection of its own (NewPublisher with this
	// Config), and stops when Run returns, after the handlers. Messages
	// the relay has not sent by then wait in the table for the next relay.
	Outbox *outbox.Outbox

	// KeyHeader names a header carrying the key of a message without an
	// AMQP message-id property. A message with neither goes down the
	// Pipeline.MissingKey path (default: dead-lettered with reason
	// "missing-key"; never a silent drop).
	KeyHeader string

	// DeadLetterExchange and DeadLetterRoutingKey are where dead-lettered
	// copies are published (with publisher confirms, before the original is
	// acknowledged). Default: the default exchange with routing key
	// DeadLetterQueue, a durable queue the consumer declares, named Queue +
	// ".dlq" unless set. With a DeadLetterExchange set nothing is declared
	// and the routing key defaults to Queue; the exchange must route it.
	DeadLetterExchange, DeadLetterRoutingKey, DeadLetterQueue string
}

// withDefaults fills the zero fields of c and validates it.
// connDefaults checks the connection fields of c (URL, the TLS fields)
// and fills in the defaults of ReconnectBackoff, ConnectTimeout,
// Heartbeat, FrameSize and MaxBodyBytes.
func (c Config) connDefaults() (Config, error) {
	if c.URL == "" {
		return c, fmt.Errorf("%w: no URL", ErrConfig)
	}
	u, err := amqp.ParseURI(c.URL)
	if err != nil {
		return c, fmt.Errorf("%w: URL %s: cannot parse", ErrConfig, redact.Strict(c.URL))
	}
	if u.Scheme != "amqps" && (c.TLS != nil || c.CAFile != "" || c.CertFile != "" || c.KeyFile != "") {
		return c, fmt.Errorf("%w: TLS options set for a %s:// URL; use amqps://", ErrConfig, u.Scheme)
	}
	c.ReconnectBackoff = consumerkit.WithDefaults(c.ReconnectBackoff, 100*time.Millisecond, 10*time.Second, 1)
	if c.ConnectTimeout <= 0 {
		c.ConnectTimeout = defaultConnectTimeout
	}
	if c.Heartbeat <= 0 {
		c.Heartbeat = defaultHeartbeat
	}
	if c.FrameSize <= 0 {
		c.FrameSize = defaultFrameSize
	}
	if c.FrameSize < 4096 {
		return c, fmt.Errorf("%w: FrameSize %d below AMQP's minimum 4096", ErrConfig, c.FrameSize)
	}
	if c.MaxBodyBytes <= 0 {
		c.MaxBodyBytes = defaultMaxBodyBytes
	}
	return c, nil
}

func (c Config) withDefaults() (Config, error) {
	c, err := c.connDefaults()
	if err != nil {
		return c, err
	}
	if c.Queue == "" {
		return c, fmt.Errorf("%w: no Queue", ErrConfig)
	}
	if c.Handler == nil {
		return c, fmt.Errorf("%w: nil Handler", ErrConfig)
	}
	if c.Prefetch <= 0 {
		c.Prefetch = defaultPrefetch
	}
	if c.Prefetch > 65535 {
		return c, fmt.Errorf("%w: Prefetch %d above 65535", ErrConfig, c.Prefetch)
	}
	if c.Concurrency <= 0 {
		c.Concurrency = defaultConcurrency
	}
	switch {
	case c.InFlight < 0:
		return c, fmt.Errorf("%w: negative InFlight %d", ErrConfig, c.InFlight)
	case c.InFlight == 0 && c.Concurrency == 1:
		c.InFlight = 1
	case c.InFlight == 0:
		c.InFlight = max(c.Prefetch, c.Concurrency)
	case c.InFlight < c.Concurrency:
		return c, fmt.Errorf("%w: InFlight %d below Concurrency %d: a handler slot could never be used", ErrConfig, c.InFlight, c.Concurrency)
	case c.InFlight > max(c.Prefetch, c.Concurrency):
		return c, fmt.Errorf("%w: InFlight %d above Prefetch %d: the broker never has more than Prefetch deliveries out", ErrConfig, c.InFlight, c.Prefetch)
	}
	c.Pipeline.Backoff = consumerkit.WithDefaults(c.Pipeline.Backoff, 100*time.Millisecond, defaultMaxRequeueDelay, 1)
	if c.ShutdownTimeout <= 0 {
		c.ShutdownTimeout = defaultShutdownTimeout
	}
	if c.ConsumerTag == "" {
		c.ConsumerTag = "msgaudit"
	}
	if c.DeadLetterExchange == "" {
		if c.DeadLetterQueue == "" {
			c.DeadLetterQueue = c.Queue + defaultDeadLetterSuffix
		}
		if c.DeadLetterRoutingKey == "" {
			c.DeadLetterRoutingKey = c.DeadLetterQueue
		}
	} else if c.DeadLetterRoutingKey == "" {
		c.DeadLetterRoutingKey = c.Queue
	}
	if c.DeadLetterExchange == "" && c.DeadLetterRoutingKey == c.Queue {
		return c, fmt.Errorf("%w: dead letters would be routed back to %q", ErrConfig, c.Queue)
	}
	return c, nil
}

// address is the broker's host:port from URL, safe to log ("" if URL does
// not parse; New has refused such a URL).
func (c Config) address() string {
	u, err := amqp.ParseURI(c.URL)
	if err != nil {
		return ""
	}
	return net.JoinHostPort(u.Host, strconv.Itoa(u.Port))
}

// tlsConfig builds the client TLS configuration for an amqps:// URL from
// Config.TLS and the file fields (nil: amqp091's default from the URL).
func (c *Config) tlsConfig() (*tls.Config, error) {
	t, err := tlsconf.Build(c.TLS, tlsconf.Files{CAFile: c.CAFile, CertFile: c.CertFile, KeyFile: c.KeyFile, ServerName: c.ServerName})
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrConfig, err)
	}
	return t, nil
}

// String describes the configuration with every secret redacted: the
// password of URL never appears. %v, %+v, %#v and %s of a Config use it.
func (c Config) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "rabbitconsumer.Config{URL:%s Queue:%q", redact.Strict(c.URL), c.Queue)
	if c.TLS != nil || c.CAFile != "" || c.CertFile != "" || c.ServerName != "" {
		fmt.Fprintf(&b, " TLS:{custom:%t CAFile:%q CertFile:%q ServerName:%q}", c.TLS != nil, c.CAFile, c.CertFile, c.ServerName)
	}
	fmt.Fprintf(&b, " Prefetch:%d Concurrency:%d InFlight:%d MaxAttempts:%d ConnectRetries:%d Heartbeat:%v FrameSize:%d MaxBodyBytes:%d",
		c.Prefetch, c.Concurrency, c.InFlight, c.Pipeline.MaxAttempts, c.ConnectRetries, c.Heartbeat, c.FrameSize, c.MaxBodyBytes)
	fmt.Fprintf(&b, " Declare:%t Store:%t Inbox:%t MemoryOnly:%t Namespace:%q KeyHeader:%q DeadLetter:{Exchange:%q RoutingKey:%q Queue:%q}}",
		c.Declare, c.Pipeline.Store != nil, c.Pipeline.Inbox != nil, c.Pipeline.MemoryOnly, c.Pipeline.Namespace, c.KeyHeader, c.DeadLetterExchange, c.DeadLetterRoutingKey, c.DeadLetterQueue)
	return b.String()
}

// Format makes every verb (%#v included) print the redacted String.
func (c Config) Format(f fmt.State, verb rune) { redact.Format(f, verb, c.String()) }

// String describes the consumer by its configuration, redacted as
// Config.String redacts it: the consumer's unexported fields (the
// configuration, the redactor) would otherwise print URLs raw under %+v.
func (c *Consumer) String() string { return "rabbitconsumer.Consumer{" + c.cfg.String() + "}" }

// Format makes every verb (%#v included) print the redacted String.
func (c *Consumer) Format(f fmt.State, verb rune) { redact.Format(f, verb, c.String()) }
