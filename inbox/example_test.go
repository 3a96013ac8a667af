package inbox_test

import (
	"context"
	"database/sql"
	"fmt"
	"log"
	"os"
	"path/filepath"

	"github.com/acemq/msgaudit/inbox"
	"github.com/acemq/msgaudit/receiver"
	_ "modernc.org/sqlite"
)

// Example records a payment and its message key in one SQLite
// transaction. The same message delivered again, to a restarted process
// with an empty memory, is recognised from the inbox table and not applied
// twice.
func Example() {
	dir, err := os.MkdirTemp("", "inbox-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	// The DSN the inbox needs on SQLite: IMMEDIATE transactions and a busy timeout.
	db, err := sql.Open("sqlite", "file:"+filepath.Join(dir, "app.db")+
		"?_txlock=immediate&_pragma=busy_timeout(5000)&_pragma=journal_mode(WAL)")
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	ctx := context.Background()
	if _, err := db.ExecContext(ctx, `CREATE TABLE payments (id TEXT PRIMARY KEY, cents INTEGER NOT NULL)`); err != nil {
		log.Fatal(err)
	}
	ib, err := inbox.New(ctx, db, inbox.Options{Dialect: inbox.SQLite})
	if err != nil {
		log.Fatal(err)
	}
	pay := inbox.Handler(func(ctx context.Context, tx *sql.Tx, m *receiver.Message) error {
		_, err := tx.ExecContext(ctx, `INSERT INTO payments (id, cents) VALUES (?, 100)`, m.Key)
		return err // nil: the inbox commits payment and key together
	})
	for run := 1; run <= 2; run++ { // two runs of the process: the second is a restart
		r, err := receiver.New(receiver.Config{Selectors: []receiver.Selector{ib}})
		if err != nil {
			log.Fatal(err)
		}
		res := r.Process(ctx, &receiver.Message{Key: "ID:producer-1:1:1:1", Destination: "/queue/payments"}, pay)
		fmt.Printf("run %d: %v duplicate=%v reason=%q\n", run, res.Action, res.Duplicate, res.Reason)
	}
	var n int
	if err := db.QueryRowContext(ctx, `SELECT count(*) FROM payments`).Scan(&n); err != nil {
		log.Fatal(err)
	}
	fmt.Println("payments:", n)
	// Output:
	// run 1: ack duplicate=false reason=""
	// run 2: ack duplicate=true reason="inbox"
	// payments: 1
}
