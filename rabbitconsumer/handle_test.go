package rabbitconsumer

import (
	"bytes"
	"context"
	"errors"
	"github.com/acemq/msgaudit/internal/copyhdr"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/acemq/msgaudit/receiver"
	amqp "github.com/rabbitmq/amqp091-go"
)

// fakeChannel records acks, nacks and published dead letters.
type fakeChannel struct {
	mu        sync.Mutex
	ops       []string
	published []amqp.Publishing
	pubErr    error
	ackErr    error
}

func (f *fakeChannel) Ack(tag uint64, multiple bool) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.ops = append(f.ops, "ack")
	return f.ackErr
}

func (f *fakeChannel) Nack(tag uint64, multiple, requeue bool) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if requeue {
		f.ops = append(f.ops, "nack-requeue")
	} else {
		f.ops = append(f.ops, "nack-drop")
	}
	return nil
}

func (f *fakeChannel) Reject(tag uint64, requeue bool) error { return errors.New("unused") }

func (f *fakeChannel) publish(_ context.Context, exchange, key string, msg amqp.Publishing) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.ops = append(f.ops, "publish:"+exchange+"/"+key)
	if f.pubErr != nil {
		return f.pubErr
	}
	f.published = append(f.published, msg)
	return nil
}

func (f *fakeChannel) log() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return strings.Join(f.ops, " ")
}

// rig is a Consumer with a fake generation, for driving handle directly.
type rig struct {
	c   *Consumer
	r   *receiver.Receiver
	g   *generation
	ch  *fakeChannel
	log *bytes.Buffer
}

func newRig(t testing.TB, h receiver.Handler, mod func(*Config)) *rig {
	t.Helper()
	var logs bytes.Buffer
	cfg := Config{
		URL:          "amqp://guest:Gu3st-pw@127.0.0.1:1/",
		Queue:        "orders",
		Handler:      h,
		MaxBodyBytes: 64,
		Pipeline: receiver.Config{Logger: slog.New(slog.NewTextHandler(&logs, nil)), MemoryOnly: true, MaxAttempts: 2,
			Backoff: receiver.Backoff{Initial: time.Millisecond, Max: time.Millisecond}}}
	if mod != nil {
		mod(&cfg)
	}
	cfg.Pipeline.MemoryOnly = cfg.Pipeline.Store == nil // memory only unless mod chose a store
	c, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	r := c.rcv
	ch := &fakeChannel{}
	rg := &rig{c: c, r: r, ch: ch, log: &logs}
	rg.g = rg.generation(1, ch)
	return rg
}

// generation returns a fake generation n settling on ch.
func (g *rig) generation(n uint64, ch ackChannel) *generation {
	gen := &generation{n: n, pub: g.ch, stop: make(chan struct{})}
	gen.acks = newAcker(ch, &gen.dead, &g.c.st, g.c.log, g.c.cfg.Prefetch)
	return gen
}

// deliver runs d through handle on the current generation, as the next
// delivery tag unless d has one.
func (g *rig) deliver(d amqp.Delivery) {
	d.Acknowledger = g.ch
	if d.DeliveryTag == 0 {
		d.DeliveryTag = g.g.acks.next()
	}
	g.g.acks.add(d.DeliveryTag)
	g.c.handle(context.Background(), g.g, g.r, d)
}

// TestHandleSettlement drives one delivery per case through handle and
// checks what reaches the channel.
func TestHandleSettlement(t *testing.T) {
	t.Parallel()
	boom := errors.New("boom")
	for _, tc := range []struct {
		name    string
		handler receiver.Handler
		mod     func(*Config)
		d       amqp.Delivery
		prep    func(g *rig)
		ops     string
		reason  string // dead-letter reason prefix
	}{
		{name: "success acks", handler: nopHandler, d: amqp.Delivery{MessageId: "a"}, ops: "ack"},
		{name: "failure requeues", handler: func(context.Context, *receiver.Message) error { return boom },
			d: amqp.Delivery{MessageId: "a"}, ops: "nack-requeue"},
		{name: "last attempt dead-letters", handler: func(context.Context, *receiver.Message) error { return boom },
			d:   amqp.Delivery{MessageId: "a", Headers: amqp.Table{HeaderDeliveryCount: int64(1)}},
			ops: "publish:/orders.dlq ack", reason: "max-attempts: 2 attempts"},
		{name: "missing id dead-letters", handler: nopHandler, d: amqp.Delivery{}, ops: "publish:/orders.dlq ack",
			reason: "missing-key"},
		{name: "key header", handler: nopHandler, mod: func(c *Config) { c.KeyHeader = "k" },
			d: amqp.Delivery{Headers: amqp.Table{"k": "order-1"}}, ops: "ack"},
		{name: "oversized body", handler: func(context.Context, *receiver.Message) error { panic("must not run") },
			d: amqp.Delivery{MessageId: "a", Body: make([]byte, 65)}, ops: "publish:/orders.dlq ack", reason: "body-too-large: 65 bytes, limit 64"},
		{name: "custom dead-letter exchange", handler: nopHandler, mod: func(c *Config) { c.DeadLetterExchange = "dlx" },
			d: amqp.Delivery{}, ops: "publish:dlx/orders ack", reason: "missing-key"},
		{name: "dead-letter publish fails: handed back", handler: nopHandler, d: amqp.Delivery{},
			prep: func(g *rig) { g.ch.pubErr = errors.New("channel closed") }, ops: "publish:/orders.dlq nack-requeue"},
		{name: "dead generation: nothing sent", handler: nopHandler, d: amqp.Delivery{MessageId: "a"},
			prep: func(g *rig) { g.g.dead.Store(true) }, ops: ""},
		{name: "stopping: handed back unprocessed", handler: func(context.Context, *receiver.Message) error { panic("must not run") },
			d: amqp.Delivery{MessageId: "a"}, prep: func(g *rig) { g.g.stopping.Store(true) }, ops: "nack-requeue"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			g := newRig(t, tc.handler, tc.mod)
			if tc.prep != nil {
				tc.prep(g)
			}
			g.deliver(tc.d)
			if got := g.ch.log(); got != tc.ops {
				t.Fatalf("channel ops %q; want %q", got, tc.ops)
			}
			if tc.reason != "" {
				if len(g.ch.published) != 1 {
					t.Fatalf("published %d", len(g.ch.published))
				}
				p := g.ch.published[0]
				r, _ := p.Headers[copyhdr.DeadLetterReason].(string)
				if !strings.HasPrefix(r, tc.reason) || p.Headers[HeaderOriginalQueue] != "orders" || p.DeliveryMode != amqp.Persistent {
					t.Errorf("dead letter headers %v mode %d; want reason %q", p.Headers, p.DeliveryMode, tc.reason)
				}
			}
			if strings.Contains(g.log.String(), "Gu3st-pw") {
				t.Errorf("logs reveal the password: %s", g.log)
			}
		})
	}
}

// TestRedeliveryAfterLostAck: a success whose ack was lost with its
// channel is remembered; the redelivery on the next generation is
// acknowledged as a duplicate without running the handler again. A
// failure on the dead generation is released, so its redelivery runs.
func TestRedeliveryAfterLostAck(t *testing.T) {
	t.Parallel()
	runs := map[string]int{}
	var mu sync.Mutex
	h := func(_ context.Context, m *receiver.Message) error {
		mu.Lock()
		defer mu.Unlock()
		runs[m.Key]++
		if m.Key == "bad" && runs[m.Key] == 1 {
			return errors.New("first attempt fails")
		}
		return nil
	}
	g := newRig(t, h, nil)
	// The channel dies while each handler runs: its settlement finds the
	// generation dead.
	dying := g.g
	g.c.cfg.Handler = func(ctx context.Context, m *receiver.Message) error {
		err := h(ctx, m)
		dying.dead.Store(true)
		return err
	}
	g.deliver(amqp.Delivery{MessageId: "good", DeliveryTag: 1})
	dying.dead.Store(false)
	g.deliver(amqp.Delivery{MessageId: "bad", DeliveryTag: 2})
	if ops := g.ch.log(); ops != "" {
		t.Fatalf("sent %q on a dead generation", ops)
	}
	if st := g.c.Stats(); st.StaleAcks != 2 {
		t.Fatalf("stale acks %d; want 2", st.StaleAcks)
	}
	// Next generation: both come back redelivered.
	g.c.cfg.Handler = h
	g.g = g.generation(2, g.ch)
	g.deliver(amqp.Delivery{MessageId: "good", DeliveryTag: 1, Redelivered: true})
	g.deliver(amqp.Delivery{MessageId: "bad", DeliveryTag: 2, Redelivered: true})
	if ops := g.ch.log(); ops != "ack ack" {
		t.Fatalf("ops %q; want two acks", ops)
	}
	mu.Lock()
	defer mu.Unlock()
	if runs["good"] != 1 || runs["bad"] != 2 {
		t.Fatalf("runs %v; want good once, bad twice", runs)
	}
	if s := g.c.Metrics().Snapshot(); s.Duplicates() != 1 || s.Redelivered != 2 {
		t.Fatalf("metrics %+v", s)
	}
}

func TestMessage(t *testing.T) {
	t.Parallel()
	ts := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	c := &Consumer{cfg: Config{Queue: "orders", ConsumerTag: "tag", KeyHeader: "x-key"}}
	m := c.message(amqp.Delivery{MessageId: "id-1", Redelivered: true, Timestamp: ts, Body: []byte("b"),
		Headers: amqp.Table{
			"s": "str", "b": []byte("bytes"), "i": int32(-7), "l": int64(1 << 40), "f": 1.5, "t": true,
			"time": ts, "nil": nil, "tbl": amqp.Table{"a": 1}, HeaderDeliveryCount: int64(2), "x-key": "hdr",
		}})
	if m.Key != "id-1" || m.Destination != "orders" || !m.Redelivered || !m.Timestamp.Equal(ts) || m.Attempt != 3 {
		t.Fatalf("message %+v", m)
	}
	for k, want := range map[string]string{"s": "str", "b": "bytes", "i": "-7", "l": "1099511627776", "f": "1.5",
		"t": "true", "time": "2026-01-02T03:04:05Z", "nil": "", "tbl": "map[a:1]", "x-key": "hdr"} {
		if got := m.Headers[k]; got != want {
			t.Errorf("header %s = %q; want %q", k, got, want)
		}
	}
	if m := c.message(amqp.Delivery{Headers: amqp.Table{"x-key": "hdr"}}); m.Key != "hdr" || m.Attempt != 0 {
		t.Errorf("key header fallback: %+v", m)
	}
	if m := c.message(amqp.Delivery{}); m.Key != "" || m.Headers != nil {
		t.Errorf("no id, no header: %+v", m)
	}
}

func TestClassify(t *testing.T) {
	t.Parallel()
	c := &Consumer{cfg: Config{URL: "amqp://u:Cl4ss-pw@h/"}, red: newRedactor("amqp://u:Cl4ss-pw@h/")}
	for _, tc := range []struct {
		err  error
		want error
	}{
		{amqp.ErrCredentials, ErrRejected},
		{&amqp.Error{Code: amqp.NotAllowed, Reason: "vhost", Server: true}, ErrRejected},
		{&amqp.Error{Code: amqp.NotFound, Reason: "no queue", Server: true}, nil},
		{errors.New("dial tcp: refused Cl4ss-pw"), nil},
	} {
		got := c.classify(tc.err)
		if tc.want != nil && !errors.Is(got, tc.want) {
			t.Errorf("classify(%v) = %v; want %v", tc.err, got, tc.want)
		}
		if tc.want == nil && (errors.Is(got, ErrRejected) || errors.Is(got, ErrTLS)) {
			t.Errorf("classify(%v) = %v; want a retryable error", tc.err, got)
		}
		if !errors.Is(got, tc.err) || strings.Contains(got.Error(), "Cl4ss-pw") {
			t.Errorf("classify(%v) = %v: chain lost or password shown", tc.err, got)
		}
	}
}

// TestMetrics: the consumer counts its deliveries in the shared receiver
// metrics, which the exporters publish under the transport label the
// caller gives (promexport.Receiver(c.Metrics().Snapshot, "amqp")).
func TestMetrics(t *testing.T) {
	t.Parallel()
	g := newRig(t, nopHandler, nil)
	g.deliver(amqp.Delivery{MessageId: "a"})
	g.deliver(amqp.Delivery{MessageId: "a"})
	if s := g.c.Metrics().Snapshot(); s.Delivered != 2 || s.DuplicatesAudit != 1 {
		t.Errorf("snapshot: %d delivered, %d audit duplicates; want 2, 1", s.Delivered, s.DuplicatesAudit)
	}
}
