package outbox

import (
	"context"
	"errors"
)

// Message is one outgoing message.
type Message struct {
	// Destination is where the relay publishes the message, in the
	// spelling of the transport it publishes with: a STOMP destination
	// ("/queue/orders"), an AMQP routing key on the default exchange (a
	// queue name), or a NATS subject.
	Destination string
	// Body is the payload.
	Body []byte
	// Headers are sent with the message. Names the transport reserves
	// (the id headers, STOMP frame headers) are refused by Send.
	Headers map[string]string
	// OrderKey, when set, orders the message behind every earlier
	// committed message with the same OrderKey: they leave in commit order,
	// one in flight at a time. Messages without one leave in parallel.
	OrderKey string
}

// A Publisher publishes outgoing messages for a relay (Outbox.Run). The
// STOMP, RabbitMQ and NATS consumer packages each provide one.
type Publisher interface {
	// Publish sends m with the id id, where the receiving side takes it as
	// the message's idempotency key (a STOMP header, the AMQP message_id,
	// JetStream's Nats-Msg-Id), and returns nil only once the broker has
	// confirmed that it stored the message. An error wrapping ErrRefused
	// says the broker refused this message (an unknown destination, a body
	// over its limit); any other error is taken as transient (a lost
	// connection) and the message is retried.
	Publish(ctx context.Context, id string, m Message) error
}

// ErrRefused marks a Publisher's error for a message the broker refused.
// The relay retries such a message up to Options.MaxAttempts times and
// then parks it with the error as its reason.
var ErrRefused = errors.New("outbox: the broker refused the message")
