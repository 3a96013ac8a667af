package receiver

import (
	"context"
	"strconv"
	"strings"
	"time"

	"github.com/acemq/msgaudit/internal/keyjoin"
)

// Message is the transport-neutral view of one delivery. Transports fill
// it from their frames (a STOMP MESSAGE, an AMQP delivery, a model
// delivery); Process reads it and may set Duplicate, Attempt and the
// "duplicate" header. A Message belongs to one Process call at a time.
type Message struct {
	// Key is the delivery's idempotency key: by default the broker's
	// message id (an OpenWire id on ActiveMQ). Config.KeyFunc may derive
	// another key (a producer-set header, a function of the body).
	Key string
	// Destination is where the message was delivered from, in the STOMP
	// spelling ("/queue/a", "/topic/b", "/temp-queue/c", "/temp-topic/d").
	// A name without a leading '/' is a queue (an AMQP queue name).
	Destination string
	// Consumer names the subscription that received the message. Topic
	// deliveries are tracked per consumer (each subscriber gets its own
	// copy), so it must be stable across reconnects (a durable subscription
	// name, not a per-connection id).
	Consumer string
	// Headers are the delivery's headers; nil is allowed.
	Headers map[string]string
	// Body is the payload.
	Body []byte
	// Redelivered is the broker's redelivered flag.
	Redelivered bool
	// Duplicate is set by Process when it hands a confirmed duplicate to
	// the handler under DuplicateDeliver (Spring's duplicateMessage header).
	Duplicate bool
	// Attempt is the 1-based attempt number as the transport knows it (0
	// means unknown, taken as 1). Process raises it to the receiver's own
	// count of failed attempts of the same key plus one, so transports
	// without a redelivery counter (STOMP) still reach MaxAttempts.
	Attempt int
	// Timestamp is when the message was sent, if the transport knows.
	Timestamp time.Time

	key string // the derived idempotency key, set by Process
}

// IdempotencyKey returns the key Process checks: the one derived by the
// receiver's KeyFunc during Process, else Key. Selectors use it.
func (m *Message) IdempotencyKey() string {
	if m.key != "" {
		return m.key
	}
	return m.Key
}

// Header returns the value of header name, or "" when absent.
func (m *Message) Header(name string) string {
	return m.Headers[name]
}

// IsTopic reports whether the destination is a topic or temporary topic,
// whose deliveries are tracked per consumer rather than per destination.
func (m *Message) IsTopic() bool {
	return strings.HasPrefix(m.Destination, "/topic/") || strings.HasPrefix(m.Destination, "/temp-topic/")
}

// Scope is the name under which the receiver tracks the message's key:
// the destination for queues, destination plus consumer for topics — the
// routing of ActiveMQ's ConnectionAudit. A topic's scope is the
// destination, "#" and the consumer with '%' and '#' escaped ("%25",
// "%23"), so two different pairs never share a scope.
func (m *Message) Scope() string {
	if m.IsTopic() {
		return keyjoin.Topic(m.Destination, m.Consumer)
	}
	return m.Destination
}

// Handler processes one message. A nil error means the message's effect is
// applied; any error (or panic) means it is not and must be retried.
type Handler func(ctx context.Context, m *Message) error

// KeyFunc derives the idempotency key of a delivery. An empty key or an
// error sends the delivery down the missing-key path (Config.MissingKey).
type KeyFunc func(m *Message) (string, error)

// HeaderKey returns a KeyFunc that reads the key from header name (a
// producer-set idempotency key, for brokers whose message id is not stable).
func HeaderKey(name string) KeyFunc {
	return func(m *Message) (string, error) {
		return m.Headers[name], nil
	}
}

// Action is what the transport must do with a delivery after Process.
type Action uint8

const (
	// Ack: acknowledge the delivery. Its effect is applied (or it is a
	// duplicate of finished work).
	Ack Action = iota + 1
	// Requeue: hand the delivery back and retry later; never acknowledge
	// it. On ActiveMQ a STOMP NACK is a poison ack (dead letter or
	// discard), so transports retry locally or resend, not NACK.
	Requeue
	// DeadLetter: send the message to the dead-letter destination with
	// Result.Reason and Result.Attempt, then acknowledge the original.
	DeadLetter
)

// String returns "ack", "requeue" or "dead-letter".
func (a Action) String() string {
	switch a {
	case Ack:
		return "ack"
	case Requeue:
		return "requeue"
	case DeadLetter:
		return "dead-letter"
	}
	return "action(" + strconv.Itoa(int(a)) + ")"
}

// Result is the outcome of Process.
type Result struct {
	// Action tells the transport what to do.
	Action Action
	// Reason explains a duplicate, a requeue or a dead letter: "audit",
	// "store", "in-flight", "store-error", "handler-error", "panic",
	// "missing-key", "malformed-key", "max-attempts: ...".
	Reason string
	// Err is the handler's error (a panic wraps ErrPanic), a selector's
	// error, or nil.
	Err error
	// Trace lists what each selector said, e.g. "memory:new store:claimed"
	// (for logs; the typed answer of each selector is its
	// Decision.Verdict).
	Trace string
	// Duplicate is true when the delivery was recognised as a duplicate.
	Duplicate bool
	// Ran is true when the handler ran.
	Ran bool
	// Attempt is the effective attempt number of this delivery.
	Attempt int
	// RetryAfter is the suggested backoff before a Requeue'd delivery is
	// retried (Config.Backoff).
	RetryAfter time.Duration
}

// headerDuplicate is set to "true" on a duplicate delivered under
// DuplicateDeliver.
const headerDuplicate = "duplicate"
