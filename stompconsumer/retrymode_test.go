package stompconsumer

import (
	"bufio"
	"bytes"
	"context"
	"database/sql"
	"io"
	"net"
	"path/filepath"
	"regexp"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/acemq/msgaudit/idempotency"
	"github.com/acemq/msgaudit/inbox"
	"github.com/acemq/msgaudit/internal/copyhdr"
	"github.com/acemq/msgaudit/receiver"
)

// TestDefaultRetriesInPlace: without CopySecret a failed handler is
// retried in place, on the same delivery: no retry copy is sent, the
// message is applied once, and a message that always fails is
// dead-lettered after MaxAttempts handler runs; in memory and with the
// inbox, whose failed attempts roll back their effect.
func TestDefaultRetriesInPlace(t *testing.T) {
	for _, tier := range []string{"memory", "inbox"} {
		t.Run(tier, func(t *testing.T) {
			addr := stompAddr(t)
			q := "/queue/" + uniq("msgaudit.inplace")
			dlq := "/queue/" + uniq("msgaudit.inplace.dlq")
			tag := uniq("tag")
			produce(t, addr, q, tag, 2, nil) // "0" fails once, "1" always
			got := newSeen()
			fails := func(m *receiver.Message) error {
				got.add(m)
				if string(m.Body) == "1" || len(got.get("0")) == 1 {
					return errInjected
				}
				return nil
			}
			p := receiver.Config{MemoryOnly: true}
			h := func(_ context.Context, m *receiver.Message) error { return fails(m) }
			applied := func() int { return len(got.get("0")) - 1 }
			if tier == "inbox" {
				db, err := sql.Open("sqlite", "file:"+filepath.Join(t.TempDir(), "app.db")+"?_txlock=immediate&_pragma=busy_timeout(10000)")
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { _ = db.Close() })
				if _, err := db.Exec(`CREATE TABLE fx (body TEXT PRIMARY KEY, n INTEGER NOT NULL)`); err != nil {
					t.Fatal(err)
				}
				ib, err := inbox.New(context.Background(), db, inbox.Options{Dialect: inbox.SQLite})
				if err != nil {
					t.Fatal(err)
				}
				p = receiver.Config{Inbox: ib}
				h = inbox.Handler(func(ctx context.Context, tx *sql.Tx, m *receiver.Message) error {
					if _, err := tx.ExecContext(ctx, `INSERT INTO fx (body, n) VALUES (?, 1) ON CONFLICT (body) DO UPDATE SET n = n + 1`, string(m.Body)); err != nil {
						return err
					}
					return fails(m)
				})
				applied = func() int {
					var n int
					if err := db.QueryRow(`SELECT coalesce(sum(n), 0) FROM fx`).Scan(&n); err != nil {
						t.Fatal(err)
					}
					return n
				}
			}
			p.MaxAttempts = 3
			p.Backoff = receiver.Backoff{Initial: time.Millisecond, Max: 5 * time.Millisecond}
			c, err := New(Config{
				Addresses:             []string{addr},
				DeadLetterDestination: dlq,
				Subscriptions:         []Subscription{{Destination: q, Handler: h}},
				Pipeline:              p})
			if err != nil {
				t.Fatal(err)
			}
			stop := runConsumer(t, c)
			waitFor(t, 30*time.Second, "one applied, one dead-lettered", func() bool {
				return c.Metrics().Snapshot().Processed == 1 && c.Stats().DeadLetters == 1
			})
			if err := stop(); err != nil {
				t.Fatal(err)
			}
			if s := c.Stats(); s.RetriesSent != 0 || s.LocalRetries != 3 {
				t.Errorf("retry copies %d, retries in place %d; want 0 and 3 (one for \"0\", two for \"1\")", s.RetriesSent, s.LocalRetries)
			}
			if runs := got.get("0"); len(runs) != 2 || runs[0].Header("message-id") != runs[1].Header("message-id") || runs[1].Attempt != 2 {
				t.Errorf("\"0\" ran %d times; want twice, on one delivery, the second as attempt 2", len(runs))
			}
			if runs := got.get("1"); len(runs) != 3 || runs[2].Attempt != 3 {
				t.Errorf("\"1\" ran %d times; want MaxAttempts = 3", len(runs))
			}
			if n := applied(); n != 1 {
				t.Errorf("%d effects committed, want 1", n)
			}
			dl := drain(t, addr, dlq, 300*time.Millisecond)
			if len(dl) != 1 || dl[0]["body"] != "1" || dl[0][copyhdr.Attempts] != "3" {
				t.Errorf("dead-letter destination holds %v; want \"1\" after 3 attempts", dl)
			}
			if left := drain(t, addr, q, 300*time.Millisecond); len(left) != 0 {
				t.Errorf("queue not empty: %v", left)
			}
			checkBrokerDLQ(t, addr, q)
		})
	}
}

// sameIDProxy forwards connections to upstream and gives every MESSAGE
// frame from the broker that carries the header line mark the message-id
// id(): what a consumer sees of a producer's duplicate that reuses the
// original's message-id, as an OpenWire producer's resend after a failover
// does. (A STOMP producer cannot choose a message-id: ActiveMQ replaces
// it, see TestProducerMessageIDIgnored.) ACKs name the ack header, which
// is left alone.
func sameIDProxy(t *testing.T, upstream, mark string, id func() string) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var conns []net.Conn
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	})
	msgID := regexp.MustCompile(`(?m)^message-id:[^\n]*`)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			up, err := net.Dial("tcp", upstream)
			if err != nil {
				c.Close()
				continue
			}
			mu.Lock()
			conns = append(conns, c, up)
			mu.Unlock()
			go func() { _, _ = io.Copy(up, c); up.Close() }()
			go func() {
				defer c.Close()
				sc := bufio.NewScanner(up)
				sc.Buffer(make([]byte, 64<<10), 1<<20)
				sc.Split(stompFrames)
				for sc.Scan() {
					f := sc.Bytes()
					if bytes.HasPrefix(f, []byte("MESSAGE\n")) && bytes.Contains(f, []byte("\n"+mark+"\n")) {
						f = msgID.ReplaceAll(f, []byte("message-id:"+id()))
					}
					if _, err := c.Write(f); err != nil {
						return
					}
				}
			}()
		}
	}()
	return ln.Addr().String()
}

// TestDefaultNoCopyAcrossConsumers: two consumers (each with its own
// receiver and audit, as two processes) share one store, or one inbox,
// with the default configuration (no CopySecret). A's handler fails the
// message's first attempt; while A holds it, the producer's duplicate
// (same key: a producer header named by KeyHeader, or, with the default
// KeyHeader, the same message-id) reaches B and is applied; then A stops.
// The message must be applied once, and both queues end empty. A retry
// copy from A, which B cannot authenticate, would be keyed by its own
// message-id and applied a second time.
func TestDefaultNoCopyAcrossConsumers(t *testing.T) {
	for _, tier := range []string{"store", "inbox"} {
		for _, keyHeader := range []string{"x-idem-key", "message-id"} {
			t.Run(tier+"/"+keyHeader, func(t *testing.T) { noCopyAcrossConsumers(t, tier, keyHeader) })
		}
	}
}

func noCopyAcrossConsumers(t *testing.T, tier, keyHeader string) {
	addr := stompAddr(t)
	q := "/queue/" + uniq("msgaudit.nocopy")
	var (
		pipeline func() receiver.Config // one per consumer, over the shared tier
		handler  func(fail bool) receiver.Handler
		applied  func() int // the effects, over both consumers
	)
	switch tier {
	case "store":
		store := memStore(t, idempotency.Options{})
		var n atomic.Int64
		pipeline = func() receiver.Config { return receiver.Config{Store: store} }
		handler = func(fail bool) receiver.Handler {
			return func(context.Context, *receiver.Message) error {
				if fail {
					return errInjected
				}
				n.Add(1)
				return nil
			}
		}
		applied = func() int { return int(n.Load()) }
	case "inbox":
		dsn := "file:" + filepath.Join(t.TempDir(), "shared.db") + "?_txlock=immediate&_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)"
		open := func() *sql.DB {
			db, err := sql.Open("sqlite", dsn)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = db.Close() })
			return db
		}
		db := open()
		if _, err := db.Exec(`CREATE TABLE fx (body TEXT PRIMARY KEY, n INTEGER NOT NULL)`); err != nil {
			t.Fatal(err)
		}
		pipeline = func() receiver.Config { // a database handle per process
			ib, err := inbox.New(context.Background(), open(), inbox.Options{Dialect: inbox.SQLite})
			if err != nil {
				t.Fatal(err)
			}
			return receiver.Config{Inbox: ib}
		}
		handler = func(fail bool) receiver.Handler {
			return inbox.Handler(func(ctx context.Context, tx *sql.Tx, m *receiver.Message) error {
				if _, err := tx.ExecContext(ctx, `INSERT INTO fx (body, n) VALUES (?, 1) ON CONFLICT (body) DO UPDATE SET n = n + 1`, string(m.Body)); err != nil {
					return err
				}
				if fail {
					return errInjected // rolls the effect back
				}
				return nil
			})
		}
		applied = func() int {
			var n int
			if err := db.QueryRow(`SELECT coalesce(sum(n), 0) FROM fx`).Scan(&n); err != nil {
				t.Fatal(err)
			}
			return n
		}
	}
	dlq := noDeadLetters(t, addr)
	idemKey := uniq("producer") + ":1"
	produce(t, addr, q, uniq("tag"), 1, func(int) map[string]string { return map[string]string{"x-idem-key": idemKey} })

	var originalID atomic.Value // the message-id A saw
	failed := make(chan struct{})
	var once atomic.Bool
	fail := handler(true)
	pa := pipeline()
	pa.Backoff = receiver.Backoff{Initial: time.Hour, Max: time.Hour} // A holds the message until it stops
	a, err := New(Config{
		Addresses:             []string{addr},
		KeyHeader:             keyHeader,
		Prefetch:              1, // the duplicate waits for B
		DeadLetterDestination: dlq,
		Subscriptions: []Subscription{{Destination: q, Handler: func(ctx context.Context, m *receiver.Message) error {
			err := fail(ctx, m)
			if once.CompareAndSwap(false, true) {
				originalID.Store(m.Header("message-id"))
				close(failed)
			}
			return err
		}}},
		Pipeline: pa})
	if err != nil {
		t.Fatal(err)
	}
	stopA := runConsumer(t, a)
	select {
	case <-failed:
	case <-time.After(30 * time.Second):
		t.Fatal("A never ran its handler")
	}

	// The producer's duplicate: the same body and key header, and, seen
	// through B's proxy, the same message-id.
	const mark = "x-test-duplicate:1"
	produce(t, addr, q, uniq("tag"), 1, func(int) map[string]string {
		return map[string]string{"x-idem-key": idemKey, "x-test-duplicate": "1"}
	})
	pb := pipeline()
	pb.Backoff = receiver.Backoff{Initial: time.Millisecond, Max: 5 * time.Millisecond}
	var b *Consumer
	b, err = New(Config{
		Addresses:             []string{sameIDProxy(t, addr, mark, func() string { return originalID.Load().(string) })},
		KeyHeader:             keyHeader,
		DeadLetterDestination: dlq,
		Subscriptions:         []Subscription{{Destination: q, Handler: handler(false)}},
		Pipeline:              pb})
	if err != nil {
		t.Fatal(err)
	}
	stopB := runConsumer(t, b)
	waitFor(t, 30*time.Second, "B applied the duplicate", func() bool { return applied() == 1 })

	if err := stopA(); err != nil {
		t.Fatal(err)
	}
	// What A leaves behind (its delivery, or a copy of it) reaches B.
	waitFor(t, 30*time.Second, "B settled a second delivery", func() bool {
		m := b.Metrics().Snapshot()
		return m.Processed+m.Duplicates() >= 2
	})
	if err := stopB(); err != nil {
		t.Fatal(err)
	}
	if n := applied(); n != 1 {
		t.Errorf("the message was applied %d times, want once (A: %+v; B: %+v)", n, a.Stats(), b.Metrics().Snapshot())
	}
	if s := a.Stats(); s.RetriesSent != 0 {
		t.Errorf("A sent %d retry copies without a CopySecret, want 0", s.RetriesSent)
	}
	if left := drain(t, addr, q, 300*time.Millisecond); len(left) != 0 {
		t.Errorf("queue not empty: %v", left)
	}
	checkBrokerDLQ(t, addr, q)
}
