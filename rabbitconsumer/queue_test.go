package rabbitconsumer

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/acemq/msgaudit/idempotency"
	"github.com/acemq/msgaudit/idempotency/sqlitestore"
	"github.com/acemq/msgaudit/receiver"
	amqp "github.com/rabbitmq/amqp091-go"
)

// TestStoreChoice: running without a durable store is an explicit choice
// (MemoryOnly), never the silent meaning of a nil Store.
func TestStoreChoice(t *testing.T) {
	t.Parallel()
	var nilSQLite *sqlitestore.Store
	var nilStore idempotency.Store // what `store, _ := idempotency.Open(…)` leaves on an error
	mem := memStore(t, idempotency.Options{})
	defer mem.Close()
	for _, tt := range []struct {
		name string
		cfg  Config
		want string // "" = valid
	}{
		{"nothing chosen", Config{Pipeline: receiver.Config{Store: nilStore}}, "no Store, Inbox or Selectors"},
		{"typed-nil store", Config{Pipeline: receiver.Config{Store: nilSQLite}}, "Store is a nil *sqlitestore.Store"},
		{"typed-nil store and MemoryOnly", Config{Pipeline: receiver.Config{Store: nilSQLite, MemoryOnly: true}}, "Store is a nil *sqlitestore.Store"},
		{"store and MemoryOnly", Config{Pipeline: receiver.Config{Store: mem, MemoryOnly: true}}, "MemoryOnly set together with a Store"},
		{"store", Config{Pipeline: receiver.Config{Store: mem}}, ""},
		{"MemoryOnly", Config{Pipeline: receiver.Config{MemoryOnly: true}}, ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			cfg := tt.cfg
			cfg.URL, cfg.Queue, cfg.Handler = "amqp://guest:guest@127.0.0.1:5672/", "orders", nopHandler
			c, err := New(cfg)
			if tt.want == "" {
				if err != nil || c == nil {
					t.Fatalf("New: %v, want a consumer", err)
				}
				return
			}
			if !errors.Is(err, ErrConfig) || c != nil {
				t.Fatalf("New = %v, %v; want ErrConfig", c, err)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("New: %q does not say %q", err, tt.want)
			}
		})
	}
}

// deleteQueues deletes the named queues when the test ends; a queue that
// does not exist is fine.
func deleteQueues(t *testing.T, b *broker, names ...string) {
	t.Cleanup(func() {
		conn, err := amqp.Dial(b.url)
		if err != nil {
			t.Errorf("cleanup: %v", err)
			return
		}
		defer conn.Close()
		for _, name := range names {
			ch, err := conn.Channel() // a failed delete closes its channel
			if err != nil {
				t.Errorf("cleanup: %v", err)
				return
			}
			var ae *amqp.Error
			if _, err := ch.QueueDelete(name, false, false, false); err != nil && !(errors.As(err, &ae) && ae.Code == amqp.NotFound) {
				t.Errorf("cleanup: delete %s: %v", name, err)
			}
			ch.Close()
		}
	})
}

// queueExists reports whether q exists (a passive declare on its own
// channel).
func queueExists(t *testing.T, b *broker, q string) bool {
	t.Helper()
	ch, err := b.conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	defer ch.Close()
	_, err = ch.QueueDeclarePassive(q, true, false, false, false, nil)
	var ae *amqp.Error
	if errors.As(err, &ae) && ae.Code == amqp.NotFound {
		return false
	}
	if err != nil {
		t.Fatal(err)
	}
	return true
}

// TestMissingQueue: a queue that does not exist is one clear error from
// Run, at once: not retried, not called a connection failure, and nothing
// (no dead-letter queue) is left on the broker.
func TestMissingQueue(t *testing.T) {
	t.Parallel()
	b := newBroker(t)
	q := randomName(t, "msgaudit-missing-")
	deleteQueues(t, b, q, q+defaultDeadLetterSuffix)
	var logs bytes.Buffer
	c, err := New(Config{
		URL:     b.url,
		Queue:   q,
		Handler: nopHandler,
		// ConnectRetries unset: a failed start is retried until ctx is done
		Pipeline: receiver.Config{MemoryOnly: true, Logger: slog.New(slog.NewTextHandler(&logs, nil))}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err = c.Run(ctx)
	if ctx.Err() != nil {
		t.Fatalf("Run did not return within 30s for a missing queue: %v", err)
	}
	if !errors.Is(err, ErrNoQueue) || errors.Is(err, ErrConnect) {
		t.Fatalf("Run = %v; want ErrNoQueue and not ErrConnect", err)
	}
	want := `rabbitconsumer: queue "` + q + `" does not exist on amqp://`
	if msg := err.Error(); !strings.HasPrefix(msg, want) || !strings.Contains(msg, "set Config.Declare") || strings.Count(msg, "rabbitconsumer:") != 1 {
		t.Fatalf("Run's error %q: want one sentence starting %q that points at Config.Declare", msg, want)
	}
	if st := c.Stats(); st.ConnectErrors != 0 {
		t.Fatalf("a missing queue was retried: %+v", st)
	}
	if strings.Contains(logs.String(), "connect failed") {
		t.Fatalf("a missing queue was logged as a connection failure:\n%s", logs.String())
	}
	if queueExists(t, b, q+defaultDeadLetterSuffix) {
		t.Fatal("the dead-letter queue of a missing queue was declared")
	}
	// The guarantee is logged once per consumer, not once per Run.
	if err := c.Run(ctx); !errors.Is(err, ErrNoQueue) {
		t.Fatalf("second Run = %v; want ErrNoQueue", err)
	}
	const guarantee = "level=WARN msg=\"rabbitconsumer: memory-only duplicate detection (Pipeline.MemoryOnly): duplicates are absorbed while this process runs, across reconnects; after a restart, or on another consumer, a redelivery of finished work is applied again\""
	if n := strings.Count(logs.String(), guarantee); n != 1 {
		t.Fatalf("memory-only guarantee logged %d times over two runs, want once:\n%s", n, logs.String())
	}
}

// TestDeclareQueue: with Declare the consumer creates its queue, durable
// and with the arguments given, and consumes from it.
func TestDeclareQueue(t *testing.T) {
	t.Parallel()
	b := newBroker(t)
	q := randomName(t, "msgaudit-declare-")
	deleteQueues(t, b, q, q+defaultDeadLetterSuffix)
	args := amqp.Table{"x-max-length": int32(1000)}
	h := newCounting()
	c, err := New(Config{URL: b.url, Queue: q, Handler: h.handle, Declare: true, QueueArguments: args, Pipeline: receiver.Config{MemoryOnly: true}})
	if err != nil {
		t.Fatal(err)
	}
	stop := runConsumer(t, c)
	waitFor(t, "the consumer connected", func() bool { return c.Stats().Connects == 1 })
	// An equivalent declaration succeeds only if the queue is durable and
	// has exactly these arguments; anything else is PRECONDITION_FAILED.
	ch, err := b.conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ch.QueueDeclare(q, true, false, false, false, args); err != nil {
		t.Fatalf("the declared queue is not durable with %v: %v", args, err)
	}
	ch.Close()
	b.publish(q, amqp.Publishing{MessageId: "declared"})
	waitFor(t, "the message on the declared queue was handled", func() bool { return h.n("declared") == 1 })
	if err := stop(); err != nil {
		t.Fatal(err)
	}
}

// TestDeclareMismatch: declaring an existing queue with other arguments is
// refused by the broker; Run says so at once instead of retrying.
func TestDeclareMismatch(t *testing.T) {
	t.Parallel()
	b := newBroker(t)
	q := b.queue("msgaudit-mismatch-") // durable, no arguments
	c, err := New(Config{
		URL:            b.url,
		Queue:          q,
		Handler:        nopHandler,
		Declare:        true,
		QueueArguments: amqp.Table{"x-max-length": int32(10)},
		Pipeline:       receiver.Config{MemoryOnly: true}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err = c.Run(ctx)
	if ctx.Err() != nil {
		t.Fatalf("Run did not return within 30s: %v", err)
	}
	if !errors.Is(err, ErrDeclare) || errors.Is(err, ErrConnect) {
		t.Fatalf("Run = %v; want ErrDeclare", err)
	}
	if !strings.Contains(err.Error(), "PRECONDITION_FAILED") {
		t.Fatalf("Run's error %q does not give the broker's reason", err)
	}
	if st := c.Stats(); st.ConnectErrors != 0 {
		t.Fatalf("a refused declaration was retried: %+v", st)
	}
}

// memStore returns a Memory with options o, failing tb if NewMemory refuses
// them.
func memStore(tb testing.TB, o idempotency.Options) *idempotency.Memory {
	tb.Helper()
	m, err := idempotency.NewMemory(o)
	if err != nil {
		tb.Fatalf("NewMemory(%+v): %v", o, err)
	}
	return m
}
