package connaudit

import (
	"fmt"
	"strings"
)

// Kind is the type of a destination. The zero Kind is not a valid kind, so
// the zero Destination means "no destination".
type Kind uint8

const (
	// Queue is a point-to-point destination: every consumer on the
	// connection shares one audit per queue, because a redelivered queue
	// message may land on a different consumer.
	Queue Kind = iota + 1
	// TempQueue is a temporary queue; it is audited like a Queue.
	TempQueue
	// Topic is a publish-subscribe destination: each consumer has its own
	// audit, because every subscriber receives its own copy.
	Topic
	// TempTopic is a temporary topic; it is audited like a Topic.
	TempTopic
)

// String returns the STOMP path segment of the kind ("queue", "temp-queue",
// "topic", "temp-topic"), or "kind(N)" for an invalid kind.
func (k Kind) String() string {
	switch k {
	case Queue:
		return "queue"
	case TempQueue:
		return "temp-queue"
	case Topic:
		return "topic"
	case TempTopic:
		return "temp-topic"
	}
	return fmt.Sprintf("kind(%d)", uint8(k))
}

// Valid reports whether k is one of Queue, TempQueue, Topic and TempTopic.
func (k Kind) Valid() bool { return k >= Queue && k <= TempTopic }

// Destination names a queue or topic. Two destinations are the same when
// both kind and name are equal (as ActiveMQ compares class and physical
// name): Queue "a" and TempQueue "a" are different destinations.
type Destination struct {
	Kind Kind
	Name string
}

// maxShownLen bounds how much of an offending input an error message quotes.
const maxShownLen = 64

func trunc(s string) string {
	if len(s) <= maxShownLen {
		return s
	}
	return s[:maxShownLen] + "..."
}

// prefixes maps each accepted STOMP prefix to its kind. ActiveMQ's STOMP
// transport names temporary destinations created by another connection
// "/remote-temp-queue/..." and "/remote-temp-topic/..."; they are accepted
// as TempQueue and TempTopic.
var prefixes = [...]struct {
	prefix string
	kind   Kind
}{
	{"/queue/", Queue},
	{"/topic/", Topic},
	{"/temp-queue/", TempQueue},
	{"/temp-topic/", TempTopic},
	{"/remote-temp-queue/", TempQueue},
	{"/remote-temp-topic/", TempTopic},
}

// ParseDestination parses a STOMP destination name: "/queue/NAME",
// "/topic/NAME", "/temp-queue/NAME", "/temp-topic/NAME" (and ActiveMQ's
// "/remote-temp-queue/NAME", "/remote-temp-topic/NAME"). NAME must be
// non-empty and is kept verbatim (it may contain '/'). Anything else is an
// error wrapping ErrDestination.
func ParseDestination(s string) (Destination, error) {
	for _, p := range prefixes {
		if name, ok := strings.CutPrefix(s, p.prefix); ok {
			if name == "" {
				return Destination{}, fmt.Errorf("%w: empty name in %q", ErrDestination, trunc(s))
			}
			return Destination{Kind: p.kind, Name: name}, nil
		}
	}
	return Destination{}, fmt.Errorf("%w: %q (want /queue/, /topic/, /temp-queue/ or /temp-topic/ and a name)", ErrDestination, trunc(s))
}

// String returns the STOMP form "/<kind>/<name>", which ParseDestination
// accepts back; the zero Destination gives "".
func (d Destination) String() string {
	if d == (Destination{}) {
		return ""
	}
	return "/" + d.Kind.String() + "/" + d.Name
}

// IsQueue reports whether d is a queue or a temporary queue, i.e. whether it
// is audited per destination (shared by all consumers) rather than per
// consumer.
func (d Destination) IsQueue() bool { return d.Kind == Queue || d.Kind == TempQueue }

// IsZero reports whether d is the zero Destination ("no destination").
func (d Destination) IsZero() bool { return d == (Destination{}) }

// validate reports whether d can be audited.
func (d Destination) validate() error {
	if !d.Kind.Valid() {
		return fmt.Errorf("%w: kind %d for %q", ErrDestination, uint8(d.Kind), trunc(d.Name))
	}
	if d.Name == "" {
		return fmt.Errorf("%w: empty name for %s", ErrDestination, d.Kind)
	}
	return nil
}
