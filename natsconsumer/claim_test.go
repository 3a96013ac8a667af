package natsconsumer

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/acemq/msgaudit/idempotency"
	"github.com/acemq/msgaudit/idempotency/sqlitestore"
	"github.com/acemq/msgaudit/internal/keyjoin"
	"github.com/acemq/msgaudit/internal/testkit/testwait"
	"github.com/acemq/msgaudit/receiver"
)

// TestWaitsForAnotherOwnersClaim: a message whose key another process
// claimed in the shared store and then left (it crashed) waits for the
// claim to lapse and then runs its handler. The waits are not deliveries
// the crash-loop guard counts: the message is not dead-lettered unrun,
// however many times it was deferred.
func TestWaitsForAnotherOwnersClaim(t *testing.T) {
	e := newEnv(t, 0)
	ctx := testwait.Context(t, testwait.Long)
	store, err := sqlitestore.Open(ctx, filepath.Join(t.TempDir(), "idem.db"),
		sqlitestore.Options{Options: idempotency.Options{ClaimTTL: 3 * time.Second}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = store.Close() })
	ack := e.publish("claimed elsewhere", "")
	key := idempotency.Key{Namespace: keyjoin.Topic(e.stream, e.consumer), ID: deliveryKey(e.stream, ack.Sequence, "")}
	if out, _, err := store.TryClaim(ctx, key); err != nil || out != idempotency.Claimed {
		t.Fatalf("claim of the other process: %v, %v", out, err)
	}
	var calls counter
	cfg := e.config(e.url, func(ctx context.Context, m *receiver.Message) error {
		calls.add(string(m.Body))
		return nil
	})
	cfg.Pipeline.Store = store
	cfg.Pipeline.Backoff = receiver.Backoff{Initial: 20 * time.Millisecond, Max: 100 * time.Millisecond}
	c := newConsumer(t, cfg)
	stop := start(t, c)
	testwait.Until(t, 30*time.Second, "the message settled", func() bool {
		s := c.Stats()
		return (s.Acks == 1 || s.DeadLetters > 0) && e.drained()
	})
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if k := calls.get("claimed elsewhere"); k != 1 {
		t.Errorf("handler ran %d times; want 1 once the claim lapsed", k)
	}
	if s := c.Stats(); s.DeadLetters != 0 || s.Acks != 1 {
		t.Errorf("stats %+v: want the message acknowledged, none dead-lettered", s)
	}
}
