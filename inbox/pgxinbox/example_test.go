package pgxinbox_test

import (
	"context"
	"log"
	"os"

	"github.com/acemq/msgaudit/inbox"
	"github.com/acemq/msgaudit/inbox/pgxinbox"
	"github.com/acemq/msgaudit/receiver"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Example wraps a handler that credits an account in the same PostgreSQL
// transaction that records the message key. (It needs a server, so it is
// compiled but not run; TestFlow runs the same flow.)
func Example() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("MSGAUDIT_POSTGRES_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	ib, err := pgxinbox.New(ctx, pool, inbox.Options{Table: "payments_inbox"})
	if err != nil {
		log.Fatal(err)
	}
	r, err := receiver.New(receiver.Config{Inbox: ib})
	if err != nil {
		log.Fatal(err)
	}
	h := r.Wrap(pgxinbox.Handler(func(ctx context.Context, tx pgx.Tx, m *receiver.Message) error {
		_, err := tx.Exec(ctx, `UPDATE accounts SET cents = cents + 100 WHERE id = $1`, string(m.Body))
		return err
	}))
	// h is the handler a consumer runs: nil means acknowledge (effect and
	// key committed, or a duplicate); an error means requeue or dead-letter
	// (receiver.ActionOf tells which).
	if err := h(ctx, &receiver.Message{Key: "m-1", Destination: "/queue/payments", Body: []byte("alice")}); err != nil {
		log.Print(receiver.ActionOf(err), ": ", err)
	}
}
