package stompconsumer

import (
	"context"
	"database/sql"
	"errors"
	"math/rand/v2"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/acemq/msgaudit/inbox"
	"github.com/acemq/msgaudit/receiver"
)

var errInjected = errors.New("handler failure injected by the test")

// TestInboxExactlyOnce runs the transactional inbox (SQLite) against
// ActiveMQ: 600 persistent messages, 10% first-attempt handler failures
// (retried in place, the default), three connection cuts through a TCP proxy
// while handlers run, the last one followed by a consumer restart on a new
// database handle. Every message's effect is committed exactly once, none
// lost, the queue and the dead-letter destination empty at the end.
func TestInboxExactlyOnce(t *testing.T) {
	addr := stompAddr(t)
	const n = 600
	q := "/queue/" + uniq("msgaudit.inbox")
	dlq := "/queue/" + uniq("msgaudit.inbox.dlq")
	produce(t, addr, q, uniq("tag"), n, nil)
	dsn := "file:" + filepath.Join(t.TempDir(), "app.db") + "?_txlock=immediate&_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)"
	openDB := func() *sql.DB {
		db, err := sql.Open("sqlite", dsn)
		if err != nil {
			t.Fatal(err)
		}
		db.SetMaxOpenConns(8)
		t.Cleanup(func() { _ = db.Close() })
		return db
	}
	db := openDB()
	if _, err := db.Exec(`CREATE TABLE fx (body TEXT PRIMARY KEY, n INTEGER NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	var fails atomic.Int64
	var tried sync.Map
	handler := inbox.Handler(func(ctx context.Context, tx *sql.Tx, m *receiver.Message) error {
		if _, err := tx.ExecContext(ctx, `INSERT INTO fx (body, n) VALUES (?, 1) ON CONFLICT (body) DO UPDATE SET n = n + 1`, string(m.Body)); err != nil {
			return err
		}
		time.Sleep(time.Millisecond) // so cuts catch handlers mid-run
		if _, again := tried.LoadOrStore(string(m.Body), true); !again && rand.IntN(10) == 0 {
			fails.Add(1)
			return errInjected
		}
		return nil
	})
	applied := func() (rows, max int) {
		if err := db.QueryRow(`SELECT count(*), coalesce(max(n), 0) FROM fx`).Scan(&rows, &max); err != nil {
			t.Fatal(err)
		}
		return rows, max
	}
	px := newProxy(t, addr)
	newConsumer := func(db *sql.DB) *Consumer {
		ib, err := inbox.New(context.Background(), db, inbox.Options{Dialect: inbox.SQLite})
		if err != nil {
			t.Fatal(err)
		}
		c, err := New(Config{
			Addresses:             []string{px.Addr()},
			Subscriptions:         []Subscription{{Destination: q, Handler: handler}},
			Prefetch:              50,
			Concurrency:           4,
			ReconnectBackoff:      receiver.Backoff{Initial: 5 * time.Millisecond, Max: 50 * time.Millisecond},
			DeadLetterDestination: dlq,
			Pipeline:              receiver.Config{MaxAttempts: 12, Backoff: receiver.Backoff{Initial: time.Millisecond, Max: 20 * time.Millisecond}, Inbox: ib},
		})
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	c1 := newConsumer(db)
	stop1 := runConsumer(t, c1)
	cuts := 0
	for _, at := range []int{150, 300} {
		waitFor(t, 60*time.Second, "progress before a cut", func() bool { r, _ := applied(); return r >= at })
		if px.Cut() > 0 {
			cuts++
		}
	}
	waitFor(t, 60*time.Second, "progress before the restart", func() bool { r, _ := applied(); return r >= 400 })
	// The first consumer loses its connection for good and stops: work it
	// committed whose acks died with the connection is redelivered to the
	// second, whose memory is empty, so only the inbox table knows it.
	px.SetDown(true)
	if px.Cut() > 0 {
		cuts++
	}
	if err := stop1(); err != nil {
		t.Fatalf("first consumer's Run: %v", err)
	}
	px.SetDown(false)
	c2 := newConsumer(openDB())
	stop2 := runConsumer(t, c2)
	waitFor(t, 120*time.Second, "every message applied", func() bool { r, _ := applied(); return r >= n })
	if err := stop2(); err != nil {
		t.Fatalf("second consumer's Run: %v", err)
	}
	rows, most := applied()
	if rows != n || most != 1 {
		t.Errorf("%d messages applied, the most often %d times; want %d, each once", rows, most, n)
	}
	if cuts != 3 {
		t.Errorf("cut %d live connections, want 3", cuts)
	}
	if fails.Load() == 0 {
		t.Error("no handler failure was injected: the retry path was not exercised")
	}
	if sent := c1.Stats().RetriesSent + c2.Stats().RetriesSent; sent != 0 {
		t.Errorf("%d retry copies sent without a CopySecret; want retries in place", sent)
	}
	if left := drain(t, addr, q, 500*time.Millisecond); len(left) != 0 {
		t.Errorf("queue not empty: %d left", len(left))
	}
	if dl := drain(t, addr, dlq, 300*time.Millisecond); len(dl) != 0 {
		t.Errorf("dead-letter destination holds %d messages", len(dl))
	}
	checkBrokerDLQ(t, addr, q)
	m1, m2 := c1.Metrics().Snapshot(), c2.Metrics().Snapshot()
	t.Logf("injected failures %d; consumer 1: processed %d, duplicates other (inbox) %d, audit %d; consumer 2: processed %d, inbox %d, audit %d",
		fails.Load(), m1.Processed, m1.DuplicatesOther, m1.DuplicatesAudit, m2.Processed, m2.DuplicatesOther, m2.DuplicatesAudit)
}
