package outbox_test

import (
	"context"
	"database/sql"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"time"

	"github.com/acemq/msgaudit/inbox"
	"github.com/acemq/msgaudit/outbox"
	"github.com/acemq/msgaudit/receiver"
	_ "modernc.org/sqlite"
)

// printer stands in for a transport's Publisher (stompconsumer,
// rabbitconsumer, natsconsumer): it confirms every message.
type printer struct{ done chan struct{} }

func (p printer) Publish(ctx context.Context, id string, m outbox.Message) error {
	fmt.Printf("published to %s: %s\n", m.Destination, m.Body)
	close(p.done)
	return nil
}

// Example: an inbox handler records an order and sends a message about
// it in the same transaction; the relay publishes the message once that
// transaction has committed. A handler run that fails sends nothing.
func Example() {
	dir, err := os.MkdirTemp("", "outbox-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	db, err := sql.Open("sqlite", "file:"+filepath.Join(dir, "app.db")+
		"?_txlock=immediate&_pragma=busy_timeout(5000)&_pragma=journal_mode(WAL)")
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	ctx := context.Background()
	if _, err := db.ExecContext(ctx, `CREATE TABLE orders (id TEXT PRIMARY KEY)`); err != nil {
		log.Fatal(err)
	}
	ib, err := inbox.New(ctx, db, inbox.Options{Dialect: inbox.SQLite})
	if err != nil {
		log.Fatal(err)
	}
	ob, err := outbox.New(ctx, db, outbox.Options{Dialect: inbox.SQLite})
	if err != nil {
		log.Fatal(err)
	}
	defer ob.Close()
	order := inbox.Handler(func(ctx context.Context, tx *sql.Tx, m *receiver.Message) error {
		if _, err := tx.ExecContext(ctx, `INSERT INTO orders (id) VALUES (?)`, m.Key); err != nil {
			return err
		}
		return ob.Send(ctx, tx, outbox.Message{Destination: "/queue/payments", Body: []byte("pay for " + m.Key)})
	})
	r, err := receiver.New(receiver.Config{Selectors: []receiver.Selector{ib}})
	if err != nil {
		log.Fatal(err)
	}
	res := r.Process(ctx, &receiver.Message{Key: "order-1", Destination: "/queue/orders"}, order)
	fmt.Println("handled:", res.Action)

	p := printer{done: make(chan struct{})}
	rctx, stop := context.WithCancel(ctx)
	go func() { _ = ob.Run(rctx, p) }() // a consumer with Config.Outbox runs this itself
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
		fmt.Println("nothing published")
	}
	stop()
	// Output:
	// handled: ack
	// published to /queue/payments: pay for order-1
}
