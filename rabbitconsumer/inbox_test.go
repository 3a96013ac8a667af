package rabbitconsumer

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/acemq/msgaudit/inbox"
	"github.com/acemq/msgaudit/receiver"
	_ "github.com/jackc/pgx/v5/stdlib"
	amqp "github.com/rabbitmq/amqp091-go"
)

// TestInboxExactlyOnce: two competing consumers, each with its own
// PostgreSQL pool and transactional inbox on one table (two machines),
// 1,000 messages, 10% handler failures (requeued), the connection cut
// twice mid-stream through a TCP proxy. Every message's effect is
// committed exactly once, none lost, the queues empty at the end.
func TestInboxExactlyOnce(t *testing.T) {
	const total = 1000
	b := newBroker(t)
	pgURL := serviceURL(t, "MSGAUDIT_POSTGRES_URL")
	q := b.queue("msgaudit-inbox-")
	suffix := randomName(t, "")
	table, fx := "msgaudit_rabbit_inbox_"+suffix, "msgaudit_rabbit_fx_"+suffix
	admin, err := sql.Open("pgx", pgURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, tb := range []string{table, fx} {
			if _, err := admin.Exec(`DROP TABLE IF EXISTS ` + tb); err != nil {
				t.Errorf("cleanup: drop %s: %v", tb, err)
			}
		}
		_ = admin.Close()
	})
	if _, err := admin.Exec(`CREATE TABLE ` + fx + ` (body text PRIMARY KEY, n int NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	rng := rand.New(rand.NewPCG(3, 4))
	var fails atomic.Int64
	handler := inbox.Handler(func(ctx context.Context, tx *sql.Tx, m *receiver.Message) error {
		if _, err := tx.ExecContext(ctx, `INSERT INTO `+fx+` (body, n) VALUES ($1, 1) ON CONFLICT (body) DO UPDATE SET n = `+fx+`.n + 1`, string(m.Body)); err != nil {
			return err
		}
		mu.Lock()
		fail := rng.Float64() < 0.10
		mu.Unlock()
		if fail {
			fails.Add(1)
			return errors.New("injected handler failure")
		}
		return nil
	})
	applied := func() (rows, most int) {
		if err := admin.QueryRow(`SELECT count(*), coalesce(max(n), 0) FROM `+fx).Scan(&rows, &most); err != nil {
			t.Fatal(err)
		}
		return rows, most
	}
	px := newProxy(t, b.hostPort(), nil)
	runID := randomName(t, "")
	b.publishMany(q, total, func(i int) amqp.Publishing {
		return amqp.Publishing{MessageId: fmt.Sprintf("%s-%04d", runID, i), Body: []byte(fmt.Sprint(i))}
	})

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	consumers := make([]*Consumer, 2)
	runErr := make([]error, len(consumers))
	var wg sync.WaitGroup
	for i := range consumers {
		db, err := sql.Open("pgx", pgURL)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = db.Close() })
		db.SetMaxOpenConns(4)
		ib, err := inbox.New(context.Background(), db, inbox.Options{Dialect: inbox.PostgreSQL, Table: table})
		if err != nil {
			t.Fatal(err)
		}
		c, err := New(Config{
			URL:              b.via("amqp", px.Addr()),
			Queue:            q,
			Handler:          handler,
			Prefetch:         50,
			Concurrency:      4,
			ReconnectBackoff: receiver.Backoff{Initial: 10 * time.Millisecond, Max: 200 * time.Millisecond},
			ConnectionName:   fmt.Sprintf("msgaudit-inbox-test-%d", i),
			Pipeline: receiver.Config{MaxAttempts: 100, Inbox: ib,
				Backoff: receiver.Backoff{Initial: 2 * time.Millisecond, Max: 2 * time.Millisecond}},
		})
		if err != nil {
			t.Fatal(err)
		}
		consumers[i] = c
		wg.Add(1)
		go func() {
			defer wg.Done()
			runErr[i] = c.Run(ctx)
		}()
	}
	deadline := time.Now().Add(2 * time.Minute)
	for _, at := range []int{total / 3, 2 * total / 3} {
		for r, _ := applied(); r < at; r, _ = applied() {
			if time.Now().After(deadline) {
				t.Fatalf("only %d of %d messages applied before a cut", r, total)
			}
			time.Sleep(10 * time.Millisecond)
		}
		t.Logf("cut %d client connections", px.Cut())
	}
	for r, _ := applied(); r < total; r, _ = applied() {
		if time.Now().After(deadline) {
			t.Fatalf("only %d of %d messages applied", r, total)
		}
		time.Sleep(10 * time.Millisecond)
	}
	// Wait until the broker has nothing left to deliver and the consumers
	// are quiet (redeliveries of work whose ack a cut lost are absorbed).
	delivered := func() (n uint64) {
		for _, c := range consumers {
			n += c.Metrics().Delivered.Load()
		}
		return n
	}
	for last, quiet := delivered(), 0; quiet < 3; {
		if time.Now().After(deadline) {
			t.Fatal("consumers never went quiet")
		}
		time.Sleep(100 * time.Millisecond)
		if d := delivered(); d == last && b.ready(q) == 0 {
			quiet++
		} else {
			last, quiet = d, 0
		}
	}
	cancel()
	wg.Wait()
	for i, err := range runErr {
		if err != nil {
			t.Errorf("consumer %d Run: %v", i, err)
		}
	}
	if rows, most := applied(); rows != total || most != 1 {
		t.Errorf("%d messages applied, the most often %d times; want %d, each once", rows, most, total)
	}
	if n := b.ready(q); n != 0 {
		t.Errorf("queue holds %d messages at the end; want 0", n)
	}
	if n := b.ready(q + defaultDeadLetterSuffix); n != 0 {
		t.Errorf("dead-letter queue holds %d messages; want 0", n)
	}
	if fails.Load() == 0 {
		t.Error("no handler failure was injected")
	}
	for i, c := range consumers {
		s := c.Metrics().Snapshot()
		t.Logf("consumer %d: delivered %d processed %d duplicates inbox %d audit %d retries %d", i, s.Delivered, s.Processed, s.DuplicatesOther, s.DuplicatesAudit, s.Retries)
	}
}
