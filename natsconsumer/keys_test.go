package natsconsumer

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/acemq/msgaudit/idempotency"
	"github.com/acemq/msgaudit/internal/testkit/testwait"
	"github.com/acemq/msgaudit/receiver"
)

// TestPublisherIDCannotTakeDerivedKey: a publisher's Nats-Msg-Id that
// spells the key the consumer derives for another message (the stream and
// that message's sequence, in the old form and the current one, or the
// current form of a publisher id) names a message of its own: every
// message runs its handler once, with the memory tier only and with a
// store.
func TestPublisherIDCannotTakeDerivedKey(t *testing.T) {
	for _, tier := range []string{"memory", "store"} {
		t.Run(tier, func(t *testing.T) {
			e := newEnv(t, 0)
			var calls counter
			cfg := e.config(e.url, func(ctx context.Context, m *receiver.Message) error {
				calls.add(string(m.Body))
				return nil
			})
			if tier == "memory" {
				cfg.Pipeline.MemoryOnly = true
			} else {
				store, err := idempotency.NewMemory(idempotency.Options{})
				if err != nil {
					t.Fatal(err)
				}
				cfg.Pipeline.Store = store
			}
			seq := strconv.FormatUint(e.publish("plain", "").Sequence, 10)
			ids := []string{
				e.stream + ":" + seq,          // the key of "plain" before keys had domains
				"seq:" + e.stream + ":" + seq, // the key the consumer derives for "plain"
				"id:" + e.stream + ":" + seq,  // a publisher key's form, spelled by a publisher
				"id:" + "id:x",
				"x",
			}
			for i, id := range ids {
				if ack := e.publish("with-id-"+strconv.Itoa(i), id); ack.Duplicate {
					t.Fatalf("the stream took Nats-Msg-Id %q for a duplicate", id)
				}
			}
			c := newConsumer(t, cfg)
			stop := start(t, c)
			want := uint64(1 + len(ids))
			testwait.Until(t, 30*time.Second, "every message settled and the consumer drained", func() bool {
				return c.Metrics().Snapshot().Delivered >= want && e.drained()
			})
			if err := stop(); err != nil {
				t.Fatal(err)
			}
			if k := calls.get("plain"); k != 1 {
				t.Errorf("plain handled %d times; want 1", k)
			}
			for i, id := range ids {
				if k := calls.get("with-id-" + strconv.Itoa(i)); k != 1 {
					t.Errorf("the message with Nats-Msg-Id %q handled %d times; want 1", id, k)
				}
			}
		})
	}
}
