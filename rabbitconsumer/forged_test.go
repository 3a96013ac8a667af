package rabbitconsumer

import (
	"context"
	"errors"
	"github.com/acemq/msgaudit/internal/copyhdr"
	"sync"
	"testing"
	"time"

	"github.com/acemq/msgaudit/receiver"
	amqp "github.com/rabbitmq/amqp091-go"
)

// TestForgedCopyHeaders: the consumer never takes a delivery's key or
// attempt count from the copy headers a producer can set
// (x-original-key, x-attempts). A forger naming a victim's message id is
// keyed by its own, so both run; its x-attempts at MaxAttempts does not
// dead-letter it after one failure.
func TestForgedCopyHeaders(t *testing.T) {
	t.Parallel()
	b := newBroker(t)
	q := b.queue("msgaudit-forged-")
	var mu sync.Mutex
	calls := map[string][]int{} // key → attempts seen
	c, err := New(Config{
		URL:   b.url,
		Queue: q,
		Handler: func(_ context.Context, m *receiver.Message) error {
			mu.Lock()
			defer mu.Unlock()
			calls[m.IdempotencyKey()] = append(calls[m.IdempotencyKey()], m.Attempt)
			if m.IdempotencyKey() == "forger" && len(calls["forger"]) == 1 {
				return errors.New("first attempt fails")
			}
			return nil
		},
		Pipeline: receiver.Config{MemoryOnly: true, MaxAttempts: 2, Backoff: receiver.Backoff{Initial: time.Millisecond, Max: time.Millisecond}}})
	if err != nil {
		t.Fatal(err)
	}
	stop := runConsumer(t, c)
	b.publish(q, amqp.Publishing{MessageId: "forger", Body: []byte("f"),
		Headers: amqp.Table{copyhdr.OriginalKey: "victim", copyhdr.Attempts: int64(2)}})
	b.publish(q, amqp.Publishing{MessageId: "victim", Body: []byte("v")})
	waitFor(t, "both processed", func() bool { return c.Metrics().Snapshot().Processed == 2 })
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(calls["victim"]) != 1 || len(calls["forger"]) != 2 || calls["forger"][0] > 1 {
		t.Errorf("handler calls (key → attempts) %v; want victim once, forger twice from attempt 1", calls)
	}
	if st := c.Stats(); st.DeadLetters != 0 {
		t.Errorf("%d dead letters, want 0", st.DeadLetters)
	}
}
