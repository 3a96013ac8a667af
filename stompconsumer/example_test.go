package stompconsumer_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"time"

	"github.com/acemq/msgaudit/idempotency"
	"github.com/acemq/msgaudit/receiver"
	"github.com/acemq/msgaudit/stompconsumer"
)

// Example embeds the consumer in a service: two brokers (failover), TLS
// with a private CA and a login, a Redis store shared by every instance of
// the service (so a restart or another instance never applies a message
// twice), four handlers per subscription, bounded retries, then a
// dead-letter queue, and a graceful stop on SIGINT.
//
// It needs a broker, so it has no Output and is only compiled.
func Example() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()

	store, err := idempotency.Open(ctx, os.Getenv("REDIS_URL"), idempotency.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close()

	var db *sql.DB // the service's own database (opened elsewhere)

	c, err := stompconsumer.New(stompconsumer.Config{
		Addresses: []string{"ssl://mq1.internal:61612", "ssl://mq2.internal:61612"},
		Login:     "orders",
		Passcode:  os.Getenv("MQ_PASSWORD"),
		CAFile:    "/etc/ssl/mq-ca.pem",
		Subscriptions: []stompconsumer.Subscription{{
			Destination: "/queue/orders",
			Handler: func(ctx context.Context, m *receiver.Message) error {
				// Any error (or panic) rolls back the audit bit and the
				// claim; the message is retried, never lost.
				_, err := db.ExecContext(ctx, "INSERT INTO orders (id, body) VALUES ($1, $2)", m.Key, m.Body)
				return err
			},
		}},
		Concurrency:           4,
		Prefetch:              50,
		DeadLetterDestination: "/queue/orders.DLQ",
		Pipeline: receiver.Config{Store: store, MaxAttempts: 5,
			Logger:  slog.Default(), // the passcode never reaches it
			Backoff: receiver.Backoff{Initial: 200 * time.Millisecond, Max: 30 * time.Second}},
	})
	if err != nil {
		log.Fatal(err)
	}
	// Run returns nil after a graceful stop, or why it could not run:
	// ErrRejected (wrong credentials), ErrTLS (certificate not trusted),
	// or ErrConnect (no broker within ConnectRetries, when it is set; by
	// default Run keeps trying until ctx is done).
	if err := c.Run(ctx); err != nil {
		if errors.Is(err, stompconsumer.ErrRejected) {
			log.Fatalf("check the broker credentials: %v", err)
		}
		log.Fatal(err)
	}
	log.Printf("stopped: %+v, pipeline %+v", c.Stats(), c.Metrics().Snapshot())
}

// ExampleConfig_String shows that printing a Config never reveals the
// passcode or a password in an address.
func ExampleConfig_String() {
	cfg := stompconsumer.Config{
		Addresses: []string{"tcp://app:url-secret@127.0.0.1:61613"},
		Login:     "app", Passcode: "s3cr3t",
	}
	s := fmt.Sprintf("%+v", cfg)
	fmt.Println(strings.Contains(s, "s3cr3t"), strings.Contains(s, "url-secret"))
	fmt.Println(s[:strings.Index(s, " Subscriptions")])
	// Output:
	// false false
	// stompconsumer.Config{Addresses:[tcp://app:xxxxx@127.0.0.1:61613] Login:"app" Passcode:xxxxx
}
