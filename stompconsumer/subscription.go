package stompconsumer

import (
	"strings"

	"github.com/acemq/msgaudit/receiver"
)

// Subscription is one destination to consume and the handler for it.
type Subscription struct {
	// Destination is "/queue/name" or "/topic/name" (ActiveMQ spelling;
	// "/temp-queue/", "/temp-topic/" too).
	Destination string

	// Handler processes each new message. It must be safe for concurrent
	// use when Concurrency > 1. A nil error means the message's effect is
	// applied; an error or a panic means it is not, and it is retried.
	Handler receiver.Handler

	// Name identifies the subscriber in the duplicate tracking of a topic
	// (each subscriber gets its own copy of every message, so each is
	// tracked on its own). It must be stable across reconnects and
	// restarts; default: Destination. Two subscriptions to one topic in
	// one Consumer need distinct names.
	Name string

	// Concurrency, Prefetch and InFlight override the Config values for
	// this subscription when positive. InFlight's default follows this
	// subscription's Concurrency and Prefetch.
	Concurrency int
	Prefetch    int
	InFlight    int

	// Selector is a JMS message selector (ActiveMQ's "selector" header).
	Selector string

	// Headers are extra SUBSCRIBE headers (for example
	// "activemq.subscriptionName" for a durable topic subscription, which
	// also needs a client-id: set Config.ClientID).
	Headers map[string]string
}

// isTopic reports whether d is a topic (its messages cannot be sent back
// to the destination for a retry: every subscriber would get the copy).
func isTopic(d string) bool {
	return strings.HasPrefix(d, "/topic/") || strings.HasPrefix(d, "/temp-topic/")
}
