package natsconsumer_test

import (
	"context"
	"database/sql"
	"fmt"
	"log"
	"os"
	"os/signal"

	"github.com/acemq/msgaudit/inbox"
	"github.com/acemq/msgaudit/natsconsumer"
	"github.com/acemq/msgaudit/receiver"
)

// A JetStream consumer whose handler writes to PostgreSQL through the
// transactional inbox: the write and the message's key commit in one
// transaction, then the message is acknowledged; a failure is handed
// back with NakWithDelay and dead-lettered after MaxAttempts.
func Example() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	db, err := sql.Open("pgx", os.Getenv("DATABASE_URL")) // with _ "github.com/jackc/pgx/v5/stdlib"
	if err != nil {
		log.Fatal(err)
	}
	ib, err := inbox.New(ctx, db, inbox.Options{Dialect: inbox.PostgreSQL})
	if err != nil {
		log.Fatal(err)
	}
	credit := func(ctx context.Context, tx *sql.Tx, m *receiver.Message) error {
		_, err := tx.ExecContext(ctx, `INSERT INTO credits (order_id) VALUES ($1)`, string(m.Body))
		return err
	}
	c, err := natsconsumer.New(natsconsumer.Config{URL: "nats://127.0.0.1:4222",
		Stream: "ORDERS", Consumer: "billing", DeadLetterSubject: "dlq.orders",
		Pipeline: receiver.Config{Inbox: ib}, Handler: inbox.Handler(credit)})
	if err != nil {
		log.Fatal(err)
	}
	if err := c.Run(ctx); err != nil {
		log.Fatal(err)
	}
}

// A Config prints with the URL's secrets redacted, whatever the verb.
func ExampleConfig_String() {
	cfg := natsconsumer.Config{URL: "tls://app:s3cret@nats1:4222,tls://app:s3cret@nats2:4222", Stream: "ORDERS",
		Consumer: "billing", DeadLetterSubject: "dlq.orders"}
	fmt.Printf("%v\n", cfg)
	// Output:
	// natsconsumer.Config{URL:tls://xxxxx@nats1:4222,tls://xxxxx@nats2:4222 Stream:"ORDERS" Consumer:"billing" FilterSubjects:[] Concurrency:0 InFlight:0 AckWait:0s MaxAttempts:0 ConnectRetries:0 Heartbeat:0s Store:false Inbox:false MemoryOnly:false Namespace:"" DeadLetterSubject:"dlq.orders"}
}
