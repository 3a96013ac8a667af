package inbox_test

import (
	"context"
	"database/sql"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/acemq/msgaudit/inbox"
	"github.com/acemq/msgaudit/receiver"
)

// Example_batches runs 100 deliveries from 10 goroutines at once through
// one SQLite inbox: they share the lane's transactions, each under its own
// savepoint, and every acknowledgement waits for the COMMIT covering it.
// One delivery's handler fails: only its payment is rolled back.
func Example_batches() {
	dir, err := os.MkdirTemp("", "inbox-batches")
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
	if _, err := db.ExecContext(ctx, `CREATE TABLE payments (id TEXT PRIMARY KEY, cents INTEGER NOT NULL)`); err != nil {
		log.Fatal(err)
	}
	// At most 32 deliveries per COMMIT; a batch takes new members for up
	// to 5 ms while deliveries wait (the defaults, spelled out).
	ib, err := inbox.New(ctx, db, inbox.Options{Dialect: inbox.SQLite, MaxBatch: 32, Linger: 5 * time.Millisecond})
	if err != nil {
		log.Fatal(err)
	}
	r, err := receiver.New(receiver.Config{Selectors: []receiver.Selector{ib}})
	if err != nil {
		log.Fatal(err)
	}
	pay := inbox.Handler(func(ctx context.Context, tx *sql.Tx, m *receiver.Message) error {
		if _, err := tx.ExecContext(ctx, `INSERT INTO payments (id, cents) VALUES (?, 100)`, m.Key); err != nil {
			return err
		}
		if m.Key == "pay-42" {
			return fmt.Errorf("card declined") // rolls back pay-42 alone
		}
		return nil
	})
	var mu sync.Mutex
	acked, requeued := 0, 0
	var wg sync.WaitGroup
	for g := range 10 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 10 {
				res := r.Process(ctx, &receiver.Message{Key: fmt.Sprintf("pay-%d", g*10+i), Destination: "/queue/payments"}, pay)
				mu.Lock()
				if res.Action == receiver.Ack {
					acked++
				} else {
					requeued++
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	var n int
	if err := db.QueryRowContext(ctx, `SELECT count(*) FROM payments`).Scan(&n); err != nil {
		log.Fatal(err)
	}
	commits, covered := ib.Batches()
	fmt.Printf("acked %d, requeued %d, payments %d\n", acked, requeued, n)
	fmt.Println("deliveries covered by COMMITs:", covered, "in fewer COMMITs:", commits < covered)
	// Output:
	// acked 99, requeued 1, payments 99
	// deliveries covered by COMMITs: 99 in fewer COMMITs: true
}
