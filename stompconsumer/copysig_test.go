package stompconsumer

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/acemq/msgaudit/idempotency"
	"github.com/acemq/msgaudit/internal/copyhdr"
	"github.com/acemq/msgaudit/internal/copysig"
	"github.com/acemq/msgaudit/receiver"
	"github.com/go-stomp/stomp/v3/frame"
)

// seen records what each delivery's handler saw, by body.
type seen struct {
	mu   sync.Mutex
	runs map[string][]*receiver.Message
}

func newSeen() *seen { return &seen{runs: map[string][]*receiver.Message{}} }

func (s *seen) add(m *receiver.Message) {
	s.mu.Lock()
	defer s.mu.Unlock()
	c := *m
	s.runs[string(m.Body)] = append(s.runs[string(m.Body)], &c)
}

func (s *seen) get(body string) []*receiver.Message {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]*receiver.Message(nil), s.runs[body]...)
}

// TestForgedOriginalKey: a producer sends, ahead of a victim message, a
// message whose x-original-key is the victim's key, as if it were a retry
// copy of it. It is not signed by a consumer, so it is keyed by its own
// key: both handlers run (the forger's key used to make the victim a
// "duplicate", acknowledged unhandled).
func TestForgedOriginalKey(t *testing.T) {
	addr := stompAddr(t)
	q := "/queue/" + uniq("msgaudit.forged")
	tag := uniq("tag")
	victimKey, forgerKey := uniq("victim")+":1", uniq("forger")+":1"
	c := rawDial(t, addr)
	for _, m := range []struct{ body, key, original string }{
		{"forger", forgerKey, victimKey},
		{"victim", victimKey, ""},
	} {
		opts := []func(*frame.Frame) error{stompHeader("persistent", "true"), stompHeader(testTag, tag), stompHeader("x-idem-key", m.key)}
		if m.original != "" {
			opts = append(opts, stompHeader(copyhdr.OriginalKey, m.original), stompHeader(copyhdr.Attempts, "1"),
				stompHeader(copysig.Header, "v1.forged"))
		}
		if err := c.Send(q, "text/plain", []byte(m.body), opts...); err != nil {
			t.Fatal(err)
		}
	}
	_ = c.Disconnect()
	got := newSeen()
	cons, err := New(Config{
		Addresses:             []string{addr},
		KeyHeader:             "x-idem-key",
		DeadLetterDestination: noDeadLetters(t, addr),
		Subscriptions: []Subscription{{Destination: q, Handler: func(_ context.Context, m *receiver.Message) error {
			got.add(m)
			return nil
		}}},
		Pipeline: receiver.Config{MemoryOnly: true}})
	if err != nil {
		t.Fatal(err)
	}
	stop := runConsumer(t, cons)
	waitFor(t, 30*time.Second, "both messages processed", func() bool { return cons.Metrics().Snapshot().Delivered >= 2 })
	waitFor(t, 10*time.Second, "both handlers run", func() bool { return len(got.get("victim")) == 1 && len(got.get("forger")) == 1 })
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if f := got.get("forger")[0]; f.IdempotencyKey() != forgerKey || f.Attempt != 1 || f.Header(copyhdr.OriginalKey) != "" || f.Header(copysig.Header) != "" {
		t.Errorf("forger handled under key %q, attempt %d, headers %v; want its own key, attempt 1, no copy headers", f.IdempotencyKey(), f.Attempt, f.Headers)
	}
	if left := drain(t, addr, q, 300*time.Millisecond); len(left) != 0 {
		t.Errorf("queue not empty: %v", left)
	}
	checkBrokerDLQ(t, addr, q)
}

// TestForgedAttempts: a producer-set x-attempts at MaxAttempts does not
// make its message dead-letter after one failure; its attempts are
// counted from one.
func TestForgedAttempts(t *testing.T) {
	addr := stompAddr(t)
	q := "/queue/" + uniq("msgaudit.forgedattempts")
	tag := uniq("tag")
	produce(t, addr, q, tag, 1, func(int) map[string]string {
		return map[string]string{copyhdr.Attempts: "3"}
	})
	got := newSeen()
	cons, err := New(Config{
		Addresses:             []string{addr},
		DeadLetterDestination: noDeadLetters(t, addr),
		Subscriptions: []Subscription{{Destination: q, Handler: func(_ context.Context, m *receiver.Message) error {
			got.add(m)
			if len(got.get("0")) == 1 {
				return errors.New("first attempt fails")
			}
			return nil
		}}},
		Pipeline: receiver.Config{MemoryOnly: true, MaxAttempts: 3, Backoff: receiver.Backoff{Initial: time.Millisecond, Max: 5 * time.Millisecond}}})
	if err != nil {
		t.Fatal(err)
	}
	stop := runConsumer(t, cons)
	waitFor(t, 30*time.Second, "the retry applied", func() bool { return cons.Metrics().Snapshot().Processed == 1 })
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	runs := got.get("0")
	if len(runs) != 2 || runs[0].Attempt != 1 || runs[1].Attempt != 2 {
		t.Errorf("%d runs; want attempts 1 and 2", len(runs))
		for _, r := range runs {
			t.Logf("attempt %d", r.Attempt)
		}
	}
	if left := drain(t, addr, q, 300*time.Millisecond); len(left) != 0 {
		t.Errorf("queue not empty: %v", left)
	}
	checkBrokerDLQ(t, addr, q)
}

// TestCopyRecognisedAcrossConsumers: a retry copy one consumer made and
// committed as it stopped is handled by a second consumer under the
// original's key and attempt count when both share CopySecret, and as a
// new message (its own id, attempt 1) when they do not.
func TestCopyRecognisedAcrossConsumers(t *testing.T) {
	for _, shared := range []bool{true, false} {
		name := "shared secret"
		if !shared {
			name = "other secret"
		}
		t.Run(name, func(t *testing.T) {
			addr := stompAddr(t)
			q := "/queue/" + uniq("msgaudit.copysecret")
			produce(t, addr, q, uniq("tag"), 1, nil)
			secret := []byte(strings.Repeat("fleet-secret-", 3))
			failed := make(chan string, 1)
			a, err := New(Config{
				Addresses:             []string{addr},
				CopySecret:            secret,
				DeadLetterDestination: noDeadLetters(t, addr),
				Subscriptions: []Subscription{{Destination: q, Handler: func(_ context.Context, m *receiver.Message) error {
					select {
					case failed <- m.IdempotencyKey():
					default:
					}
					return errors.New("fails on the first consumer")
				}}},
				Pipeline: receiver.Config{MemoryOnly: true,
					Backoff: receiver.Backoff{Initial: time.Hour, Max: time.Hour}}}) // the copy is sent as a stops
			if err != nil {
				t.Fatal(err)
			}
			stopA := runConsumer(t, a)
			var key string
			select {
			case key = <-failed:
			case <-time.After(30 * time.Second):
				t.Fatal("the first consumer never ran its handler")
			}
			if err := stopA(); err != nil {
				t.Fatal(err)
			}
			if n := a.Stats().RetriesSent; n != 1 {
				t.Fatalf("the first consumer sent %d retry copies, want 1", n)
			}
			bSecret := secret
			if !shared {
				bSecret = nil
			}
			got := newSeen()
			b, err := New(Config{
				Addresses:             []string{addr},
				CopySecret:            bSecret,
				DeadLetterDestination: noDeadLetters(t, addr),
				Subscriptions: []Subscription{{Destination: q, Handler: func(_ context.Context, m *receiver.Message) error {
					got.add(m)
					return nil
				}}},
				Pipeline: receiver.Config{MemoryOnly: true}})
			if err != nil {
				t.Fatal(err)
			}
			stopB := runConsumer(t, b)
			waitFor(t, 30*time.Second, "the copy applied", func() bool { return len(got.get("0")) == 1 })
			if err := stopB(); err != nil {
				t.Fatal(err)
			}
			m := got.get("0")[0]
			own := m.Header("message-id")
			switch {
			case shared && (m.IdempotencyKey() != key || m.Attempt != 2):
				t.Errorf("copy handled under key %q attempt %d, want the original's %q and attempt 2", m.IdempotencyKey(), m.Attempt, key)
			case !shared && (m.IdempotencyKey() != own || own == key || m.Attempt != 1 || m.Header(copyhdr.OriginalKey) != ""):
				t.Errorf("copy handled under key %q attempt %d (own id %q, original %q), want its own id and attempt 1", m.IdempotencyKey(), m.Attempt, own, key)
			}
			if left := drain(t, addr, q, 300*time.Millisecond); len(left) != 0 {
				t.Errorf("queue not empty: %v", left)
			}
			checkBrokerDLQ(t, addr, q)
		})
	}
}

// TestCopySecretConfig: a short CopySecret is refused by New, and no
// printed Config or Consumer shows it.
func TestCopySecretConfig(t *testing.T) {
	base := Config{
		Addresses:     []string{"127.0.0.1:1"},
		Subscriptions: []Subscription{{Destination: "/queue/x", Handler: func(context.Context, *receiver.Message) error { return nil }}},
		Pipeline:      receiver.Config{MemoryOnly: true}}
	short := base
	short.CopySecret = []byte("too-short")
	if _, err := New(short); !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), "CopySecret") || strings.Contains(err.Error(), "too-short") {
		t.Fatalf("New with a 9-byte CopySecret: %v; want an ErrConfig naming CopySecret and not showing it", err)
	}
	good := base
	good.CopySecret = []byte("a-secret-nobody-sees-0123")
	c, err := New(good)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"%v", "%+v", "%#v", "%s"} {
		for _, out := range []string{fmt.Sprintf(f, good), fmt.Sprintf(f, &good), fmt.Sprintf(f, c)} {
			if strings.Contains(out, "nobody-sees") || strings.Contains(out, "97 45 115") {
				t.Errorf("%s shows the secret: %s", f, out)
			}
		}
	}
}

// confirmOnceFails fails its first Confirm, as a store whose confirm
// outcome is unknown (it may have committed).
type confirmOnceFails struct {
	idempotency.Store
	failed atomic.Bool
}

func (s *confirmOnceFails) Confirm(ctx context.Context, c idempotency.Claim) error {
	if s.failed.CompareAndSwap(false, true) {
		return errors.New("confirm outcome unknown (injected)")
	}
	return s.Store.Confirm(ctx, c)
}

// TestConfirmErrorRetriedInPlace: a delivery whose handler succeeded but
// whose confirm failed may have its effect committed, so it is retried in
// place under its own identity, never turned into a copy (which a
// consumer not sharing the CopySecret would take as a new message).
func TestConfirmErrorRetriedInPlace(t *testing.T) {
	addr := stompAddr(t)
	q := "/queue/" + uniq("msgaudit.confirmerror")
	produce(t, addr, q, uniq("tag"), 1, nil)
	store := &confirmOnceFails{Store: memStore(t, idempotency.Options{})}
	got := newSeen()
	c, err := New(Config{
		Addresses:             []string{addr},
		DeadLetterDestination: noDeadLetters(t, addr),
		Subscriptions: []Subscription{{Destination: q, Handler: func(_ context.Context, m *receiver.Message) error {
			got.add(m)
			return nil
		}}},
		Pipeline: receiver.Config{Store: store, Backoff: receiver.Backoff{Initial: time.Millisecond, Max: 5 * time.Millisecond}}})
	if err != nil {
		t.Fatal(err)
	}
	stop := runConsumer(t, c)
	waitFor(t, 30*time.Second, "the delivery confirmed", func() bool { return c.Metrics().Snapshot().Processed == 1 })
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if s := c.Stats(); s.RetriesSent != 0 || s.LocalRetries != 1 {
		t.Errorf("retry copies %d, retries in place %d; want 0 and 1", s.RetriesSent, s.LocalRetries)
	}
	if !store.failed.Load() || len(got.get("0")) == 0 {
		t.Fatal("the failing confirm was not exercised")
	}
	if left := drain(t, addr, q, 300*time.Millisecond); len(left) != 0 {
		t.Errorf("queue not empty: %v", left)
	}
	checkBrokerDLQ(t, addr, q)
}
