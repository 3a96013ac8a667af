package stompconsumer

import (
	"crypto/tls"
	"time"

	"github.com/acemq/msgaudit/outbox"
	"github.com/acemq/msgaudit/receiver"
)

// Config configures a Consumer. The zero value of every field means its
// default; Addresses and Subscriptions are required, and so is the choice
// of durability in Pipeline: a Store, an Inbox, or MemoryOnly.
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

	// ReconnectBackoff spaces reconnect attempts; its zero fields mean
	// 100ms doubling to 10s, jitter 0.5. (Handler retries are spaced by
	// Pipeline.Backoff.)
	ReconnectBackoff receiver.Backoff

	// ConnectRetries bounds the start. By default (zero or negative) Run
	// keeps trying to connect until ctx is done, over the address list in
	// rotation with ReconnectBackoff between rounds, as ActiveMQ's failover
	// transport does: a consumer started while its brokers restart or
	// change masters connects once one answers. With n > 0, Run returns
	// ErrConnect when the first attempt and n retries have failed. Each
	// failed attempt is logged at warn level with its address, its
	// number, the error and the wait before the next one. A rejected
	// CONNECT (ErrRejected) or a certificate that fails verification
	// (ErrTLS) ends Run at once either way. After the first connection
	// the consumer reconnects until ctx is done, whatever ConnectRetries
	// is. ConnectTimeout bounds one attempt (dial, TLS and CONNECT);
	// default 10s.
	ConnectRetries int
	ConnectTimeout time.Duration

	// Heartbeat is the STOMP heart-beat interval asked of the broker: a
	// connection silent for longer (plus 5s) is taken as dead. Default
	// 15s; negative disables heart-beats (TCP keep-alives then detect a
	// dead peer). The consumer sends none itself (go-stomp v3.1.3 would
	// bound its receipt waits by their interval and can wedge a
	// connection when one lapses); a COMMIT not confirmed within 10s ends
	// the connection instead (safely: see the package documentation on
	// retries).
	Heartbeat time.Duration

	// MaxHeaderBytes bounds a MESSAGE frame's command and header block, and
	// MaxBodyBytes its body; defaults 64 KiB and 16 MiB. See the package
	// documentation for what happens to a frame over a limit.
	MaxHeaderBytes, MaxBodyBytes int

	// ShutdownTimeout is how long a graceful stop lets in-flight handlers
	// run after ctx is cancelled before their context is cancelled too;
	// default 30s.
	ShutdownTimeout time.Duration

	// ClientID is sent as the client-id CONNECT header (ActiveMQ needs it
	// for durable topic subscriptions).
	ClientID string

	// Pipeline configures the duplicate pipeline the consumer builds (with
	// receiver.New) and owns. Durability is required there: Store (an
	// idempotency store shared by consumers and surviving restarts),
	// Inbox (a transactional inbox: the subscriptions' handlers get its
	// transaction through inbox.Handler or pgxinbox.Handler) or
	// MemoryOnly: true (duplicates absorbed only while this process runs;
	// Run logs this guarantee once at start). The consumer fills in what
	// only it knows: Audit when nil (a connaudit.Audit with its defaults,
	// owned by the Consumer so it survives reconnects); KeyFunc wrapped so
	// that a retry copy is keyed by the key it carries; Handlers, the sum
	// of the subscriptions' Concurrency, and LaneBound, the smallest
	// Concurrency of a subscription that holds more deliveries than it
	// runs handlers (its deliveries may hold inbox lanes while they wait
	// for one of its handlers); and the zero fields of Backoff, which spaces handler retries (100ms doubling
	// to 5s, jitter 0.2). Pipeline.Logger receives the consumer's logs
	// too (nil discards them), with the passcode and address passwords
	// redacted. Its invalid settings are errors from New.
	Pipeline receiver.Config

	// Outbox, when set, makes Run run its relay (outbox.Outbox.Run) beside
	// the handlers: it publishes what they sent with Outbox.Send, once
	// committed, on a connection of its own (NewPublisher with this
	// Config), and stops when Run returns, after the handlers. Messages
	// the relay has not sent by then wait in the table for the next relay.
	Outbox *outbox.Outbox

	// DeadLetterDestination receives dead-lettered copies; default
	// "/queue/ActiveMQ.DLQ".
	DeadLetterDestination string

	// KeyHeader names the header that carries the message key (a
	// producer-set idempotency key), and that a frame cut by the size
	// limits keeps on its dead-letter record. Default: "message-id", the
	// broker's id (ActiveMQ replaces a message-id header a STOMP producer
	// sends), or, on a delivery carrying a valid msgaudit-outbox-id header
	// (an outbox's message, see Publisher), "outbox:<that id>"; setting
	// KeyHeader turns that off.
	// Pipeline.KeyFunc, when set, derives the key from the Message
	// instead. Either way a retry copy's key is the one it carries in
	// x-original-key.
	KeyHeader string

	// CopySecret turns on retry copies. Without it (the default) a failed
	// handler is retried in place: the same delivery, left unacknowledged
	// on its connection, runs again after the backoff, and a lost
	// connection or a crash brings the original back from the broker. With
	// it, a failed handler's queue delivery is retried as a copy sent to
	// the back of its queue, committed with the ACK of the original,
	// carrying the key and attempt count (x-original-key, x-attempts) and
	// an HMAC-SHA256 of them and of the body under this secret. Those
	// headers are honoured only on a delivery whose signature verifies; on
	// any other they are removed and the delivery is keyed by its own id,
	// its attempts counted from one, so a producer cannot give its message
	// the key of another (which would then be taken as a duplicate and
	// acknowledged unhandled) or skip attempts. Set the same CopySecret on
	// every consumer of these queues, kept across restarts: a consumer
	// that cannot verify a copy takes it as a new message and can apply
	// the message twice. At least 16 bytes; 32 random bytes recommended.
	// Dead-letter copies are signed in both modes (without it, with a
	// random secret of the Consumer's own). It is never logged or printed.
	CopySecret []byte
}
