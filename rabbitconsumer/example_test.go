package rabbitconsumer_test

import (
	"context"
	"fmt"
	"github.com/acemq/msgaudit/idempotency"
	"log"
	"os"
	"os/signal"

	"github.com/acemq/msgaudit/rabbitconsumer"
	"github.com/acemq/msgaudit/receiver"
)

func applyOrder(ctx context.Context, body []byte) error { return nil }

// An existing handler, a queue and a Redis store
// (Fency's default) give an idempotent consumer — keyed by message id and
// queue, failed work requeued, duplicates acknowledged and counted.
func Example() {
	handle := func(ctx context.Context, m *receiver.Message) error { return applyOrder(ctx, m.Body) }

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	store, err := idempotency.Open(ctx, "redis://127.0.0.1:6379/0", idempotency.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close()
	c, err := rabbitconsumer.New(rabbitconsumer.Config{URL: "amqp://guest:guest@127.0.0.1:5672/", Queue: "orders",
		Pipeline: receiver.Config{Store: store}, Handler: handle})
	if err != nil {
		log.Fatal(err)
	}
	if err := c.Run(ctx); err != nil {
		log.Fatal(err)
	}
}

// A Config prints with its passwords redacted, whatever the verb.
func ExampleConfig_String() {
	cfg := rabbitconsumer.Config{URL: "amqps://app:s3cret@rabbit:5671/prod", Queue: "orders",
		CAFile: "/etc/ssl/rabbit-ca.pem"}
	fmt.Printf("%v\n", cfg)
	// Output:
	// rabbitconsumer.Config{URL:amqps://app:xxxxx@rabbit:5671/prod Queue:"orders" TLS:{custom:false CAFile:"/etc/ssl/rabbit-ca.pem" CertFile:"" ServerName:""} Prefetch:0 Concurrency:0 InFlight:0 MaxAttempts:0 ConnectRetries:0 Heartbeat:0s FrameSize:0 MaxBodyBytes:0 Declare:false Store:false Inbox:false MemoryOnly:false Namespace:"" KeyHeader:"" DeadLetter:{Exchange:"" RoutingKey:"" Queue:""}}
}
