package natsconsumer_test

import (
	"context"
	"errors"
	"log"

	"github.com/acemq/msgaudit/natsconsumer"
	"github.com/acemq/msgaudit/outbox"
)

// A Publisher is what an outbox relay publishes with: nil once the broker
// confirmed the message, outbox.ErrRefused for one it refused, any other
// error for a resend later. Publishing an id again is harmless: the
// package's Consumer, in its default configuration, takes the resend as a
// duplicate.
func ExampleNewPublisher() {
	ctx := context.Background()
	p, err := natsconsumer.NewPublisher(ctx, natsconsumer.Config{URL: "nats://127.0.0.1:4222"})
	if err != nil {
		log.Fatal(err)
	}
	defer p.Close()
	err = p.Publish(ctx, "r-0123456789abcdef", outbox.Message{Destination: "orders.created", Body: []byte("{}")})
	switch {
	case errors.Is(err, outbox.ErrRefused):
		log.Print("refused: ", err) // the relay parks it after its attempts
	case err != nil:
		log.Print("not confirmed, publish again later: ", err)
	}
}
