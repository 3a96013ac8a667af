package rabbitconsumer

import (
	"context"
	"crypto/tls"
	"fmt"
	"log/slog"
	"reflect"
	"strings"
	"time"

	"github.com/acemq/msgaudit/idempotency"
	"github.com/acemq/msgaudit/internal/nilcheck"
	"github.com/acemq/msgaudit/internal/redact"
	"github.com/acemq/msgaudit/internal/tlsconf"
	"github.com/acemq/msgaudit/receiver"
	amqp "github.com/rabbitmq/amqp091-go"
)

// Defaults for the zero fields of Config.
const (
	DefaultPrefetch         = 50
	DefaultConcurrency      = 1
	DefaultConnectRetries   = 5
	DefaultConnectTimeout   = 10 * time.Second
	DefaultHeartbeat        = 10 * time.Second
	DefaultShutdownTimeout  = 30 * time.Second
	DefaultFrameSize        = 128 << 10 // RabbitMQ's own frame_max default
	DefaultMaxBodyBytes     = 16 << 20
	DefaultMaxRequeueDelay  = 5 * time.Second
	DefaultDeadLetterSuffix = ".dlq"
)

// Headers this package writes on a dead-lettered copy, besides the
// receiver's receiver.HeaderDeadLetterReason ("x-dead-letter-reason"),
// receiver.HeaderAttempts ("x-attempts") and receiver.HeaderOriginalKey
// ("x-original-key").
const (
	// HeaderOriginalQueue names the queue the message was consumed from.
	HeaderOriginalQueue = "x-original-queue"
	// HeaderDeliveryCount is the delivery counter quorum queues set; the
	// consumer reads it as the attempt number.
	HeaderDeliveryCount = "x-delivery-count"
)

// Config configures a Consumer. The zero value of every field means its
// default; URL, Queue and Handler are required, and so is the choice of
// durability: Store, StoreURL, MemoryOnly, or a prebuilt Receiver.
//
// Config implements fmt.Formatter and String: printing it with any verb
// redacts the password of URL and StoreURL.
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

	// MaxAttempts bounds handler attempts per message before it is
	// dead-lettered; default the receiver's (5).
	MaxAttempts int

	// Backoff gives the delay before a failed delivery is handed back with
	// Nack(requeue=true) (RabbitMQ requeues it at once, so the delay is
	// what spaces the retries); nil means the receiver's exponential
	// backoff with jitter. Delays are capped at MaxRequeueDelay (default
	// 5s); during the delay the delivery keeps its prefetch slot.
	Backoff         func(attempt int) time.Duration
	MaxRequeueDelay time.Duration

	// ReconnectBackoff spaces reconnect attempts: Initial doubling to Max,
	// with full jitter; defaults 100ms and 10s.
	ReconnectBackoff Backoff

	// ConnectRetries is the number of failed connection attempts tolerated
	// at start before Run returns ErrConnect; default 5, negative = retry
	// until ctx is done. After the first connection the consumer
	// reconnects until ctx is done. ConnectTimeout bounds the dial and
	// handshake of one attempt; default 10s.
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

	// Logger receives structured logs; nil discards them.
	Logger *slog.Logger

	// ConsumerTag prefixes the consumer tag of each connection; default
	// "msgaudit". ConnectionName is shown in the management UI.
	ConsumerTag, ConnectionName string

	// Receiver is a prebuilt duplicate pipeline (shared by several
	// consumers, or with extra selectors such as a metadata-store
	// selector). When set, Audit, Store, StoreURL, Namespace, MaxAttempts,
	// Backoff, DuplicatePolicy, OnDuplicate, MissingKey and Metrics are
	// ignored: they configure the Receiver New builds otherwise.
	Receiver *receiver.Receiver

	// Audit is an optional in-memory connection audit. AMQP message ids
	// are usually UUIDs, which it cannot parse; set it when producers use
	// "<producer>:<sequence>" ids (package msgid). Without it the memory
	// tier tracks in-flight and completed keys only.
	Audit receiver.Auditor

	// Store is the idempotency store shared by competing consumers (and
	// surviving restarts). When nil and StoreURL is set, Run opens the
	// store from StoreURL ("redis://…", "rediss://…" — Fency's default —
	// or "postgres://…", "sqlite:PATH", "memory") and closes it when it
	// returns. The URL goes through idempotency.Open, so the program must
	// import the backend it names (for redis://,
	// _ "github.com/acemq/msgaudit/idempotency/redisstore"); New reports a
	// scheme no imported package serves. One of Store, StoreURL, MemoryOnly or Receiver is required;
	// a Store holding a nil pointer (as an unchecked idempotency.Open error
	// leaves it) is an error from New.
	Store    idempotency.Store
	StoreURL string

	// Inbox is the transactional inbox (an *inbox.Inbox or a
	// *pgxinbox.Inbox): it records each delivery's key in the handler's own
	// database transaction, so effect and key commit together, and Handler
	// gets that transaction through inbox.Handler (pgxinbox.Handler). It
	// runs after the memory tier, in place of Store: setting it with Store
	// or StoreURL is an error, and so are a prebuilt Receiver (put the
	// inbox in its Selectors), DuplicatePolicy DuplicateDeliver and
	// MissingKey MissingKeyProcess (both would run the handler without the
	// transaction). New sizes the inbox's lanes (transactions open at
	// once, each running its deliveries one after the other; on
	// PostgreSQL, unless the inbox's Options.Lanes is set) to Concurrency,
	// and refuses more lanes than Concurrency or a database pool with
	// fewer connections than lanes (each lane holds one). The inbox scopes
	// its keys by its own Options.Namespace, not by Namespace.
	Inbox receiver.Selector

	// MemoryOnly runs the consumer without a durable store, on purpose:
	// duplicates are absorbed only while this process runs; after a
	// restart, or on another consumer of the queue, a redelivery of work
	// already done is applied again. Run logs this guarantee once at
	// start. Setting it together with Store or StoreURL is an error.
	MemoryOnly bool

	// Namespace scopes the store's keys; default the queue name, which
	// makes the key Fency's (queue name, message id).
	Namespace string

	// KeyHeader names a header carrying the key of a message without an
	// AMQP message-id property. A message with neither goes down the
	// MissingKey path (default: dead-lettered with reason "missing-key";
	// never a silent drop).
	KeyHeader string

	// DuplicatePolicy is what happens to a confirmed duplicate (default:
	// acknowledge, log at warn, count — Fency's behaviour); OnDuplicate is
	// the hook of receiver.DuplicateHook. MissingKey is the policy for a
	// delivery without a key.
	DuplicatePolicy receiver.DuplicatePolicy
	OnDuplicate     func(ctx context.Context, m *receiver.Message, reason string)
	MissingKey      receiver.MissingKeyPolicy

	// Metrics receives the receiver's counters (and Reconnects); nil means
	// a new one (Consumer.Metrics). Export it to Prometheus with
	// promexport.Receiver(Metrics.Snapshot, "amqp").
	Metrics *receiver.Metrics

	// DeadLetterExchange and DeadLetterRoutingKey are where dead-lettered
	// copies are published (with publisher confirms, before the original is
	// acknowledged). Default: the default exchange with routing key
	// DeadLetterQueue, a durable queue the consumer declares, named Queue +
	// ".dlq" unless set. With a DeadLetterExchange set nothing is declared
	// and the routing key defaults to Queue; the exchange must route it.
	DeadLetterExchange, DeadLetterRoutingKey, DeadLetterQueue string
}

// Backoff is an exponential backoff with full jitter: attempt n (from 0)
// waits a random duration in (0, min(Initial·2ⁿ, Max)].
type Backoff struct {
	Initial, Max time.Duration
}

func (b Backoff) delay(n int) time.Duration {
	d := b.Initial
	for i := 0; i < n && d < b.Max; i++ {
		d *= 2
	}
	d = min(d, b.Max)
	return time.Duration(rand64n(int64(d))) + 1
}

// withDefaults fills the zero fields of c and validates it.
func (c Config) withDefaults() (Config, error) {
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
	if c.Queue == "" {
		return c, fmt.Errorf("%w: no Queue", ErrConfig)
	}
	if c.Handler == nil {
		return c, fmt.Errorf("%w: nil Handler", ErrConfig)
	}
	if c.Receiver == nil {
		switch durable := c.Store != nil || c.StoreURL != "" || c.Inbox != nil; {
		case c.Store != nil && nilcheck.IsNil(c.Store):
			return c, fmt.Errorf("%w: Store is a nil %T (was an error from opening it ignored?)", ErrConfig, c.Store)
		case !durable && !c.MemoryOnly:
			return c, fmt.Errorf("%w: no Inbox, Store or StoreURL: set Inbox to a transactional inbox (package inbox) so that a message whose effect is in a database is never applied twice, a store to recognise finished work across restarts and consumers, or MemoryOnly: true to detect duplicates within this process only", ErrConfig)
		case durable && c.MemoryOnly:
			return c, fmt.Errorf("%w: MemoryOnly set together with a store or inbox (Store, StoreURL or Inbox)", ErrConfig)
		}
		if c.Store == nil && c.StoreURL != "" {
			if err := idempotency.CheckScheme(c.StoreURL); err != nil {
				return c, fmt.Errorf("%w: StoreURL: %w", ErrConfig, err)
			}
		}
	}
	if c.Prefetch <= 0 {
		c.Prefetch = DefaultPrefetch
	}
	if c.Prefetch > 65535 {
		return c, fmt.Errorf("%w: Prefetch %d above 65535", ErrConfig, c.Prefetch)
	}
	if c.Concurrency <= 0 {
		c.Concurrency = DefaultConcurrency
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
	if c.MaxRequeueDelay <= 0 {
		c.MaxRequeueDelay = DefaultMaxRequeueDelay
	}
	if c.ReconnectBackoff.Initial <= 0 {
		c.ReconnectBackoff.Initial = 100 * time.Millisecond
	}
	if c.ReconnectBackoff.Max <= 0 {
		c.ReconnectBackoff.Max = 10 * time.Second
	}
	c.ReconnectBackoff.Max = max(c.ReconnectBackoff.Max, c.ReconnectBackoff.Initial)
	if c.ConnectRetries == 0 {
		c.ConnectRetries = DefaultConnectRetries
	}
	if c.ConnectTimeout <= 0 {
		c.ConnectTimeout = DefaultConnectTimeout
	}
	if c.Heartbeat <= 0 {
		c.Heartbeat = DefaultHeartbeat
	}
	if c.FrameSize <= 0 {
		c.FrameSize = DefaultFrameSize
	}
	if c.FrameSize < 4096 {
		return c, fmt.Errorf("%w: FrameSize %d below AMQP's minimum 4096", ErrConfig, c.FrameSize)
	}
	if c.MaxBodyBytes <= 0 {
		c.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if c.ShutdownTimeout <= 0 {
		c.ShutdownTimeout = DefaultShutdownTimeout
	}
	if c.ConsumerTag == "" {
		c.ConsumerTag = "msgaudit"
	}
	if c.DeadLetterExchange == "" {
		if c.DeadLetterQueue == "" {
			c.DeadLetterQueue = c.Queue + DefaultDeadLetterSuffix
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
	if c.Inbox != nil {
		if err := c.checkInbox(); err != nil {
			return c, err
		}
	}
	return c, nil
}

// checkInbox refuses configurations that would defeat the transactional
// inbox.
func (c Config) checkInbox() error {
	if v := reflect.ValueOf(c.Inbox); v.Kind() == reflect.Pointer && v.IsNil() {
		return fmt.Errorf("%w: Inbox is a nil %T", ErrConfig, c.Inbox)
	}
	switch {
	case c.Store != nil || c.StoreURL != "":
		return fmt.Errorf("%w: Inbox and Store (or StoreURL) both set: the inbox records keys in the handler's transaction, while a store claims and confirms outside it, and a crash between effect and confirm would leave the store's claim open; use one", ErrConfig)
	case c.Receiver != nil:
		return fmt.Errorf("%w: Inbox set with a prebuilt Receiver, which would run without it; put the inbox in that Receiver's Config.Selectors instead", ErrConfig)
	case c.DuplicatePolicy == receiver.DuplicateDeliver:
		return fmt.Errorf("%w: Inbox with DuplicateDeliver: a duplicate would reach the handler without the inbox's transaction; use another duplicate policy", ErrConfig)
	case c.MissingKey == receiver.MissingKeyProcess:
		return fmt.Errorf("%w: Inbox with MissingKeyProcess: a delivery without a key would reach the handler without the inbox's transaction; dead-letter it instead", ErrConfig)
	}
	lanes := 0
	if s, ok := c.Inbox.(interface{ SizeLanes(handlers int) int }); ok {
		lanes = s.SizeLanes(c.Concurrency)
	}
	// Each lane (a transaction open at once, running its deliveries'
	// handlers one after the other) holds a connection, and a delivery
	// holding a lane, with its batch's uncommitted work, must always find
	// a handler slot.
	if lanes > c.Concurrency {
		return fmt.Errorf("%w: the inbox has %d lanes but Concurrency is %d; a delivery holding a lane must always find a handler: set the inbox's Options.Lanes to at most Concurrency", ErrConfig, lanes, c.Concurrency)
	}
	if p, ok := c.Inbox.(interface{ MaxOpenConns() int }); ok {
		if n := p.MaxOpenConns(); n > 0 && n < lanes {
			return fmt.Errorf("%w: the inbox's database pool allows %d connections but the inbox has %d lanes, and each holds a connection for its open transaction; raise the pool's limit or lower Concurrency (or the inbox's Options.Lanes)", ErrConfig, n, lanes)
		}
	}
	return nil
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

// String describes the configuration with every secret redacted: passwords
// in URL and StoreURL never appear. %v, %+v, %#v and %s of a Config use it.
func (c Config) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "rabbitconsumer.Config{URL:%s Queue:%q", redact.Strict(c.URL), c.Queue)
	if c.TLS != nil || c.CAFile != "" || c.CertFile != "" || c.ServerName != "" {
		fmt.Fprintf(&b, " TLS:{custom:%t CAFile:%q CertFile:%q ServerName:%q}", c.TLS != nil, c.CAFile, c.CertFile, c.ServerName)
	}
	fmt.Fprintf(&b, " Prefetch:%d Concurrency:%d InFlight:%d MaxAttempts:%d ConnectRetries:%d Heartbeat:%v FrameSize:%d MaxBodyBytes:%d",
		c.Prefetch, c.Concurrency, c.InFlight, c.MaxAttempts, c.ConnectRetries, c.Heartbeat, c.FrameSize, c.MaxBodyBytes)
	fmt.Fprintf(&b, " Declare:%t Store:%t StoreURL:%s MemoryOnly:%t Namespace:%q KeyHeader:%q DeadLetter:{Exchange:%q RoutingKey:%q Queue:%q}}",
		c.Declare, c.Store != nil, redact.Strict(c.StoreURL), c.MemoryOnly, c.Namespace, c.KeyHeader, c.DeadLetterExchange, c.DeadLetterRoutingKey, c.DeadLetterQueue)
	return b.String()
}

// GoString redacts like String.
func (c Config) GoString() string { return c.String() }

// Format makes every verb print the redacted String.
func (c Config) Format(f fmt.State, verb rune) { redact.Format(f, verb, c.String()) }

// String describes the consumer by its configuration, redacted as
// Config.String redacts it: the consumer's unexported fields (the
// configuration, the redactor) would otherwise print URLs raw under %+v.
func (c *Consumer) String() string { return "rabbitconsumer.Consumer{" + c.cfg.String() + "}" }

// GoString redacts like String.
func (c *Consumer) GoString() string { return c.String() }

// Format makes every verb print the redacted String.
func (c *Consumer) Format(f fmt.State, verb rune) { redact.Format(f, verb, c.String()) }
