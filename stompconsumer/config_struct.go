package stompconsumer

import (
	"context"
	"crypto/tls"
	"log/slog"
	"time"

	"github.com/acemq/msgaudit/idempotency"
	"github.com/acemq/msgaudit/receiver"
)

// Config configures a Consumer. The zero value of every field means its
// default; Addresses and Subscriptions are required, and so is the choice
// of durability: a Store, MemoryOnly, or a prebuilt Receiver.
//
// Config implements fmt.Formatter and String: printing it with any verb
// redacts Passcode and passwords embedded in Addresses.
type Config struct {
	// Addresses are the brokers, tried in order and rotated on connection
	// loss: "tcp://h:p", "stomp://h:p", "ssl://h:p", "stomp+ssl://h:p" or a
	// bare "h:p" (TLS for a bare address only when a TLS option is set).
	// A missing port is 61613 (61612 with TLS). "tcp://user:pass@h:p"
	// supplies Login and Passcode when those fields are empty.
	Addresses []string

	// Login and Passcode are sent on CONNECT. Passcode is never logged and
	// never appears in an error.
	Login, Passcode string

	// VirtualHost is the STOMP host header; default: the address's host.
	VirtualHost string

	// TLS is the client TLS configuration (cloned per connection). CAFile,
	// CertFile/KeyFile and ServerName, when set, are applied on top of it
	// (or of a default config). ServerName defaults to the address's host.
	TLS                                   *tls.Config
	CAFile, CertFile, KeyFile, ServerName string

	// Subscriptions to open on every connection.
	Subscriptions []Subscription

	// Prefetch is activemq.prefetchSize, the number of unacknowledged
	// messages the broker sends ahead per subscription; default 100
	// (ActiveMQ's own default of 1000 makes every disconnect return 1000
	// prefetched messages as redeliveries).
	Prefetch int

	// Concurrency is the number of handlers running at once per
	// subscription; default 1, which handles a subscription's messages in
	// arrival order.
	Concurrency int

	// InFlight is the number of a subscription's deliveries that go
	// through the duplicate pipeline at once: up to InFlight deliveries are
	// claimed in the store (or the inbox) ahead while at most Concurrency
	// handlers run, and the confirms of finished handlers do not hold a
	// handler's place, so a store that groups concurrent calls
	// (idempotency.Group) claims and confirms a prefetch window in few
	// round trips. Default: Prefetch (or Concurrency, if larger) when
	// Concurrency is above 1, and 1 when Concurrency is 1, which keeps the
	// handlers in arrival order. A value below Concurrency, or above both
	// Prefetch and Concurrency, is an error from New. With InFlight above
	// 1 and Concurrency 1 the handlers still run one at a time, but not
	// strictly in arrival order. Deliveries claimed ahead whose handler has
	// not started when the connection is lost or a graceful stop begins are
	// rolled back (their audit bit and claim released) and left
	// unacknowledged: the broker sends them again.
	InFlight int

	// MaxAttempts bounds handler attempts per message; after the last one
	// the message is dead-lettered. Default: the receiver's default.
	MaxAttempts int

	// RetryBackoff spaces handler retries (default 100ms doubling to 5s,
	// jitter 0.2). ReconnectBackoff spaces reconnect attempts (default 100ms
	// doubling to 10s, jitter 0.5).
	RetryBackoff, ReconnectBackoff Backoff

	// ConnectRetries is the number of failed connection attempts (over the
	// address list, in rotation) tolerated at start before Run returns
	// ErrConnect; default 5, negative = retry until ctx is done. After the
	// first successful connection the consumer reconnects until ctx is done.
	// ConnectTimeout bounds one attempt (dial, TLS and CONNECT); default 10s.
	ConnectRetries int
	ConnectTimeout time.Duration

	// HeartBeat is the STOMP heart-beat interval asked for in both
	// directions; default 15s, negative disables heart-beats (TCP
	// keep-alives then detect a dead peer). go-stomp v3.1.3 also bounds the
	// wait for a transaction's receipt by the heart-beat interval minus 5s;
	// a commit not confirmed in time ends the connection (safely: see
	// the package documentation on retries).
	HeartBeat time.Duration

	// MaxHeaderBytes bounds a MESSAGE frame's command and header block, and
	// MaxBodyBytes its body; defaults 64 KiB and 16 MiB. See the package
	// documentation for what happens to a frame over a limit.
	MaxHeaderBytes, MaxBodyBytes int

	// ShutdownTimeout is how long a graceful stop lets in-flight handlers
	// run after ctx is cancelled before their context is cancelled too;
	// default 30s.
	ShutdownTimeout time.Duration

	// Logger receives structured logs; nil discards them.
	Logger *slog.Logger

	// ClientID is sent as the client-id CONNECT header (ActiveMQ needs it
	// for durable topic subscriptions).
	ClientID string

	// Receiver is a prebuilt duplicate pipeline (for example one shared by
	// several consumers in a process, or with extra selectors). When set,
	// Audit, Store, Namespace, MaxAttempts, DuplicatePolicy, OnDuplicate,
	// MissingKey and KeyFunc are ignored: they configure the Receiver New
	// builds otherwise. Its KeyFunc should be wrapped with CarriedKey so
	// retry copies keep their key.
	Receiver *receiver.Receiver

	// Audit is the in-memory connection audit; nil means a connaudit.Audit
	// with default options. It lives as long as the Consumer, so it
	// survives reconnects.
	Audit receiver.Auditor

	// Store is the idempotency store shared by consumers and surviving
	// restarts: with it, work confirmed before a restart or on another
	// consumer is recognised and not applied again. A crash between the
	// handler's effect and the store's confirm leaves the claim open, and
	// once its lease lapses the redelivery runs the handler again; for
	// effects in a SQL database use Inbox instead. One of Store, Inbox,
	// MemoryOnly or Receiver is required; a Store holding a nil pointer (as
	// an unchecked idempotency.Open error leaves it) is an error from New.
	Store idempotency.Store

	// Inbox is the transactional inbox (an *inbox.Inbox or a
	// *pgxinbox.Inbox): it records each delivery's key in the handler's own
	// database transaction, so effect and key commit together, and the
	// subscriptions' handlers get that transaction through inbox.Handler
	// (pgxinbox.Handler). It runs after the memory tier, in place of Store:
	// setting both is an error, and so are a prebuilt Receiver (put the
	// inbox in its Selectors), DuplicatePolicy DuplicateDeliver and
	// MissingKey MissingKeyProcess (both would run the handler without the
	// transaction). New sizes the inbox's lanes (transactions open at
	// once, each running its deliveries one after the other; on
	// PostgreSQL, unless the inbox's Options.Lanes is set) to the
	// subscriptions' total Concurrency, but no more than the Concurrency
	// of any subscription that holds more deliveries than it runs
	// handlers (its deliveries may hold lanes while they wait for one of
	// its handlers), and refuses more lanes than that or a database pool
	// with fewer connections than lanes (each lane holds one). The inbox scopes its keys by its own Options.Namespace,
	// not by Namespace.
	Inbox receiver.Selector

	// MemoryOnly runs the consumer without a durable store, on purpose.
	// Duplicates are then absorbed only while this process runs (the
	// connection audit and the in-flight table survive reconnects); after
	// a restart, or on another consumer of the same queue, a redelivery of
	// work already done is applied again. Run logs this guarantee once at
	// start. Setting both Store and MemoryOnly is an error.
	MemoryOnly bool

	// Namespace scopes the store's keys; "" means the destination (so
	// consumers of one queue share their keys).
	Namespace string

	// DuplicatePolicy is what happens to a confirmed duplicate (default:
	// acknowledge and drop); OnDuplicate is the hook of
	// receiver.DuplicateHook. MissingKey is the policy for a delivery
	// without a key (default: dead-letter with reason "missing-key").
	DuplicatePolicy receiver.DuplicatePolicy
	OnDuplicate     func(ctx context.Context, m *receiver.Message, reason string)
	MissingKey      receiver.MissingKeyPolicy

	// Metrics receives the receiver's counters; nil means a new one
	// (Consumer.Metrics returns it).
	Metrics *receiver.Metrics

	// DeadLetterDestination receives dead-lettered copies; default
	// "/queue/ActiveMQ.DLQ".
	DeadLetterDestination string

	// KeyHeader names the header that carries the message key (a
	// producer-set idempotency key). Default: "message-id". KeyFunc, when
	// set, derives the key instead. Either way a retry copy's key is the
	// one it carries in x-original-key.
	KeyHeader string
	KeyFunc   receiver.KeyFunc
}
