package inbox_test

import (
	"context"
	"database/sql"
	"log/slog"
	"os"
	"time"

	"github.com/acemq/msgaudit/inbox"
	"github.com/acemq/msgaudit/receiver"
	"github.com/acemq/msgaudit/stompconsumer"
	_ "github.com/jackc/pgx/v5/stdlib" // registers the "pgx" database/sql driver
)

// runPayments is the snippet of docs/inbox.md: a STOMP consumer whose handler
// credits an account in the transaction that records the message key.
func runPayments(ctx context.Context) error {
	db, err := sql.Open("pgx", os.Getenv("DATABASE_URL"))
	if err != nil {
		return err
	}
	defer db.Close()
	db.SetMaxOpenConns(8) // at least Concurrency: a running delivery holds a connection
	db.SetMaxIdleConns(8) // and keep them: database/sql would close all but 2 after each transaction
	ib, err := inbox.New(ctx, db, inbox.Options{Dialect: inbox.PostgreSQL,
		PurgeInterval: time.Hour}) // forget keys older than Retention (7 days), in short batches
	if err != nil {
		return err
	}
	defer ib.Close() // stops the purge
	c, err := stompconsumer.New(stompconsumer.Config{
		Addresses:   []string{"ssl://mq1:61612", "ssl://mq2:61612"},
		Pipeline:    receiver.Config{Inbox: ib}, // in place of Store
		Concurrency: 4,
		Subscriptions: []stompconsumer.Subscription{{
			Destination: "/queue/payments",
			Handler: inbox.Handler(func(ctx context.Context, tx *sql.Tx, m *receiver.Message) error {
				_, err := tx.ExecContext(ctx, `UPDATE accounts SET cents = cents + 100 WHERE id = $1`, string(m.Body))
				return err // nil: the credit and the key commit together, then the ack
			}),
		}},
	})
	if err != nil {
		return err
	}
	return c.Run(ctx)
}

// Example_stompConsumer wires the inbox into the STOMP consumer (it needs
// PostgreSQL and ActiveMQ, so it is compiled but not run).
func Example_stompConsumer() {
	if err := runPayments(context.Background()); err != nil {
		slog.Error("payments consumer stopped", "err", err)
	}
}
