package natsconsumer

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/acemq/msgaudit/idempotency"
	"github.com/acemq/msgaudit/internal/copyhdr"
	"github.com/acemq/msgaudit/internal/testkit/testwait"
	"github.com/acemq/msgaudit/receiver"
	"github.com/nats-io/nats.go/jetstream"
)

var errInjected = errors.New("handler failure injected by the test")

// start runs c until the returned stop is called; stop cancels Run's
// context, waits for Run to return and reports its error.
func start(t *testing.T, c *Consumer) (stop func() error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	var once sync.Once
	var err error
	stop = func() error {
		once.Do(func() {
			cancel()
			err, _ = testwait.Recv(t, done, 2*time.Minute, "Run's return after its context was cancelled")
		})
		return err
	}
	t.Cleanup(func() { _ = stop() })
	return stop
}

func newConsumer(t *testing.T, cfg Config) *Consumer {
	t.Helper()
	c, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// counter counts the handler's calls per body.
type counter struct {
	mu sync.Mutex
	n  map[string]int
}

func (c *counter) add(body string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.n == nil {
		c.n = make(map[string]int)
	}
	c.n[body]++
	return c.n[body]
}

func (c *counter) get(body string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n[body]
}

func (c *counter) len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.n)
}

// TestProcessedOnce: 300 messages through four handlers, each handled
// once and acknowledged; the consumer ends drained.
func TestProcessedOnce(t *testing.T) {
	e := newEnv(t, 0)
	const n = 300
	for i := range n {
		e.publish(strconv.Itoa(i), "")
	}
	var calls counter
	cfg := e.config(e.url, func(ctx context.Context, m *receiver.Message) error {
		calls.add(string(m.Body))
		return nil
	})
	cfg.Concurrency, cfg.InFlight = 4, 8
	cfg.Pipeline.MemoryOnly = true
	c := newConsumer(t, cfg)
	stop := start(t, c)
	testwait.Until(t, time.Minute, "every message handled and the consumer drained", func() bool {
		return calls.len() == n && e.drained()
	})
	if err := stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}
	for i := range n {
		if k := calls.get(strconv.Itoa(i)); k != 1 {
			t.Errorf("message %d handled %d times; want 1", i, k)
		}
	}
	if s := c.Stats(); s.Acks != n || s.Connects != 1 {
		t.Errorf("stats %+v: want %d acks and one connection", s, n)
	}
}

// TestMsgIDDuplicateAbsorbed: a publisher sends the same Nats-Msg-Id
// again after the stream's duplicate window: JetStream stores it twice
// (two sequences), the pipeline runs the handler once and acknowledges
// the second as a duplicate.
func TestMsgIDDuplicateAbsorbed(t *testing.T) {
	e := newEnv(t, 100*time.Millisecond)
	var calls counter
	cfg := e.config(e.url, func(ctx context.Context, m *receiver.Message) error {
		calls.add(m.Key)
		return nil
	})
	cfg.Pipeline.MemoryOnly = true
	c := newConsumer(t, cfg)
	stop := start(t, c)
	first := e.publish("order 42", "order-42")
	testwait.Until(t, time.Minute, "the first copy handled", func() bool { return calls.get("id:order-42") == 1 && e.drained() })
	// Publish again until the stream takes the id as new (its window lapsed).
	var second uint64
	testwait.Until(t, time.Minute, "a second copy stored past the duplicate window", func() bool {
		if ack := e.publish("order 42", "order-42"); !ack.Duplicate {
			second = ack.Sequence
			return true
		}
		time.Sleep(20 * time.Millisecond)
		return false
	})
	if second == first.Sequence {
		t.Fatalf("the second copy has the first's sequence %d", second)
	}
	testwait.Until(t, time.Minute, "the second copy absorbed and acknowledged", func() bool {
		return c.Metrics().Snapshot().Duplicates() == 1 && e.drained()
	})
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if k := calls.get("id:order-42"); k != 1 {
		t.Errorf("handler ran %d times for one Nats-Msg-Id; want 1", k)
	}
}

// TestLostAckAbsorbed: consumer A's handler succeeds after A lost its
// connection (cut through a proxy that then refuses A), so its Ack never
// reaches the server; after AckWait the server delivers the message to
// consumer B, a second process of the same durable consumer sharing A's
// idempotency store, which acknowledges it as a duplicate without
// running the handler.
func TestLostAckAbsorbed(t *testing.T) {
	e := newEnv(t, 0)
	store, err := idempotency.NewMemory(idempotency.Options{})
	if err != nil {
		t.Fatal(err)
	}
	var calls atomic.Int64
	started, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	px := e.newProxy()
	cfgA := e.config("nats://"+px.Addr(), func(ctx context.Context, m *receiver.Message) error {
		calls.Add(1)
		once.Do(func() { close(started) })
		<-release
		return nil
	})
	cfgA.AckWait = 2 * time.Second
	cfgA.Heartbeat = 200 * time.Millisecond
	cfgA.Pipeline.Store = store
	a := newConsumer(t, cfgA)
	stopA := start(t, a)
	e.publish("x", "")
	testwait.Recv(t, started, time.Minute, "A's handler start")
	px.SetDown(true)
	px.Cut()
	testwait.Until(t, time.Minute, "A seeing its connection lost", func() bool { return a.Stats().Lost > 0 })
	close(release)
	testwait.Until(t, time.Minute, "A's pipeline recording the success", func() bool { return a.Metrics().Snapshot().Processed == 1 })

	cfgB := e.config(e.url, func(ctx context.Context, m *receiver.Message) error {
		calls.Add(1)
		return nil
	})
	cfgB.AckWait = 2 * time.Second
	cfgB.Pipeline.Store = store
	b := newConsumer(t, cfgB)
	stopB := start(t, b)
	testwait.Until(t, time.Minute, "B absorbing the redelivery and the consumer drained", func() bool {
		return b.Metrics().Snapshot().Duplicates() == 1 && e.drained()
	})
	if err := stopB(); err != nil {
		t.Fatal(err)
	}
	if err := stopA(); err != nil {
		t.Fatal(err)
	}
	if n := calls.Load(); n != 1 {
		t.Errorf("handler ran %d times; want 1", n)
	}
	if s := b.Metrics().Snapshot(); s.Processed != 0 {
		t.Errorf("B processed %d messages; want 0 (only the duplicate)", s.Processed)
	}
}

// TestRetryWithNak: each message fails twice (NakWithDelay with the
// pipeline's backoff; JetStream redelivers it) and then succeeds. The
// handler sees the attempts 1, 2, 3 from JetStream's delivery count.
func TestRetryWithNak(t *testing.T) {
	e := newEnv(t, 0)
	const n = 20
	for i := range n {
		e.publish(strconv.Itoa(i), "")
	}
	var calls counter
	var mu sync.Mutex
	attempts := make(map[string][]int)
	cfg := e.config(e.url, func(ctx context.Context, m *receiver.Message) error {
		k := calls.add(string(m.Body))
		mu.Lock()
		attempts[string(m.Body)] = append(attempts[string(m.Body)], m.Attempt)
		mu.Unlock()
		if k <= 2 {
			return errInjected
		}
		return nil
	})
	cfg.Concurrency = 4
	cfg.Pipeline.MemoryOnly = true
	cfg.Pipeline.Backoff = receiver.Backoff{Initial: 10 * time.Millisecond, Max: 50 * time.Millisecond}
	c := newConsumer(t, cfg)
	stop := start(t, c)
	testwait.Until(t, time.Minute, "every message succeeding on its third attempt, the consumer drained", func() bool {
		for i := range n {
			if calls.get(strconv.Itoa(i)) < 3 {
				return false
			}
		}
		return e.drained()
	})
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	for i := range n {
		if got := fmt.Sprint(attempts[strconv.Itoa(i)]); got != "[1 2 3]" {
			t.Errorf("message %d: attempts %s; want [1 2 3]", i, got)
		}
	}
	if s := c.Stats(); s.Requeues != 2*n || s.Acks != n || s.DeadLetters != 0 {
		t.Errorf("stats %+v: want %d requeues, %d acks, no dead letter", s, 2*n, n)
	}
	if dl := e.deadLetters(); len(dl) != 0 {
		t.Errorf("%d dead letters; want none", len(dl))
	}
}

// TestDeadLetter: a message that always fails is dead-lettered after
// MaxAttempts: its record, with the reason, the attempts and where it
// came from, is in the dead-letter stream, and the message is
// terminated (not pending, never delivered again). A message next to it
// is handled normally.
func TestDeadLetter(t *testing.T) {
	e := newEnv(t, 0)
	var calls counter
	cfg := e.config(e.url, func(ctx context.Context, m *receiver.Message) error {
		calls.add(string(m.Body))
		if string(m.Body) == "poison" {
			return errInjected
		}
		return nil
	})
	cfg.Pipeline.MemoryOnly = true
	cfg.Pipeline.MaxAttempts = 3
	cfg.Pipeline.Backoff = receiver.Backoff{Initial: 10 * time.Millisecond, Max: 20 * time.Millisecond}
	c := newConsumer(t, cfg)
	stop := start(t, c)
	ack := e.publish("poison", "")
	e.publish("fine", "")
	testwait.Until(t, time.Minute, "the poison message's record in the dead-letter stream, the consumer drained", func() bool {
		return c.Stats().DeadLetters == 1 && calls.get("fine") == 1 && e.drained()
	})
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if k := calls.get("poison"); k != 3 {
		t.Errorf("poison handled %d times; want MaxAttempts 3", k)
	}
	dl := e.deadLetters()
	if len(dl) != 1 {
		t.Fatalf("%d dead letters; want 1", len(dl))
	}
	r := dl[0]
	want := map[string]string{
		copyhdr.Attempts:       "3",
		copyhdr.OriginalKey:    "seq:" + e.stream + ":" + strconv.FormatUint(ack.Sequence, 10),
		HeaderOriginalStream:   e.stream,
		HeaderOriginalSubject:  e.subject,
		HeaderOriginalSequence: strconv.FormatUint(ack.Sequence, 10),
	}
	for k, v := range want {
		if got := r.Header.Get(k); got != v {
			t.Errorf("record header %s = %q; want %q", k, got, v)
		}
	}
	if reason := r.Header.Get(copyhdr.DeadLetterReason); len(reason) < 12 || reason[:12] != "max-attempts" {
		t.Errorf("record reason %q; want max-attempts…", reason)
	}
	if string(r.Data) != "poison" {
		t.Errorf("record body %q; want the original's", r.Data)
	}
	if i := e.info(); i.NumAckPending != 0 || i.NumPending != 0 {
		t.Errorf("consumer %+v: the terminated message is still pending", i)
	}
}

// TestPanic: a handler that panics on a message's first attempt is
// recovered, the delivery handed back, and the second attempt applies it.
func TestPanic(t *testing.T) {
	e := newEnv(t, 0)
	var calls counter
	cfg := e.config(e.url, func(ctx context.Context, m *receiver.Message) error {
		if calls.add(string(m.Body)) == 1 {
			panic("injected panic")
		}
		return nil
	})
	cfg.Pipeline.MemoryOnly = true
	cfg.Pipeline.Backoff = receiver.Backoff{Initial: 10 * time.Millisecond, Max: 20 * time.Millisecond}
	c := newConsumer(t, cfg)
	stop := start(t, c)
	e.publish("boom", "")
	testwait.Until(t, time.Minute, "the message applied on its second attempt", func() bool {
		return c.Metrics().Snapshot().Processed == 1 && e.drained()
	})
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if s := c.Metrics().Snapshot(); s.Panics != 1 || calls.get("boom") != 2 {
		t.Errorf("panics %d, calls %d; want 1 and 2", s.Panics, calls.get("boom"))
	}
}

// TestInProgressKeepsSlowHandler: a handler that runs three times
// AckWait keeps its delivery (the consumer sends InProgress): a second
// process of the same durable consumer, idle beside it, never gets the
// message, and the server never redelivers it.
func TestInProgressKeepsSlowHandler(t *testing.T) {
	e := newEnv(t, 0)
	const ackWait = 3 * time.Second
	var calls atomic.Int64
	h := func(ctx context.Context, m *receiver.Message) error {
		calls.Add(1)
		if m.Attempt != 1 {
			return fmt.Errorf("attempt %d: the message was delivered again", m.Attempt)
		}
		t := time.NewTimer(3 * ackWait)
		defer t.Stop()
		select {
		case <-t.C:
		case <-ctx.Done():
			return ctx.Err()
		}
		return nil
	}
	var cs []*Consumer
	var stops []func() error
	for range 2 {
		cfg := e.config(e.url, h)
		cfg.AckWait = ackWait
		cfg.Pipeline.MemoryOnly = true
		c := newConsumer(t, cfg)
		cs = append(cs, c)
		stops = append(stops, start(t, c))
	}
	e.publish("slow", "")
	testwait.Until(t, time.Minute, "the slow message processed", func() bool {
		return cs[0].Metrics().Snapshot().Processed+cs[1].Metrics().Snapshot().Processed == 1 && e.drained()
	})
	for _, stop := range stops {
		if err := stop(); err != nil {
			t.Fatal(err)
		}
	}
	if n := calls.Load(); n != 1 {
		t.Errorf("handler ran %d times; want 1", n)
	}
	if d := cs[0].Metrics().Snapshot().Delivered + cs[1].Metrics().Snapshot().Delivered; d != 1 {
		t.Errorf("%d deliveries; want 1 (no redelivery while the handler ran)", d)
	}
}

// TestGracefulShutdown: a consumer stopped while handlers run lets them
// finish and acknowledges them, hands back what it had not started, and
// a second consumer (a restarted process, sharing the idempotency store)
// finds every other message: each applied once, none lost.
func TestGracefulShutdown(t *testing.T) {
	e := newEnv(t, 0)
	const n = 200
	for i := range n {
		e.publish(strconv.Itoa(i), "")
	}
	store, err := idempotency.NewMemory(idempotency.Options{})
	if err != nil {
		t.Fatal(err)
	}
	var calls counter
	var running atomic.Int64
	h := func(ctx context.Context, m *receiver.Message) error {
		running.Add(1)
		defer running.Add(-1)
		calls.add(string(m.Body))
		time.Sleep(5 * time.Millisecond) // so the stop finds handlers running
		return nil
	}
	cfg := e.config(e.url, h)
	cfg.Concurrency, cfg.InFlight = 2, 8
	cfg.Pipeline.Store = store
	first := newConsumer(t, cfg)
	stop := start(t, first)
	testwait.Until(t, time.Minute, "a quarter of the messages handled", func() bool { return calls.len() >= n/4 })
	if err := stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}
	if r := running.Load(); r != 0 {
		t.Fatalf("%d handlers still running after Run returned", r)
	}
	s := first.Metrics().Snapshot()
	if st := first.Stats(); st.Acks != s.Processed {
		t.Errorf("first consumer: %d processed but %d acknowledged", s.Processed, st.Acks)
	}
	second := newConsumer(t, cfg)
	stop = start(t, second)
	testwait.Until(t, 2*time.Minute, "every message handled and the consumer drained", func() bool {
		return calls.len() == n && e.drained()
	})
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	for i := range n {
		if k := calls.get(strconv.Itoa(i)); k != 1 {
			t.Errorf("message %d handled %d times; want 1", i, k)
		}
	}
	t.Logf("first consumer: processed %d, handed back %d", s.Processed, first.Stats().Dropped)
}

// TestCrashLoopBounded: a message JetStream has delivered more often than
// MaxAttempts without any attempt reporting a failure (here a bare client
// of the same durable consumer takes it twice and never answers, as a
// process killed in the handler would) is dead-lettered on its next
// delivery without running the handler, and terminated.
func TestCrashLoopBounded(t *testing.T) {
	e := newEnv(t, 0)
	const ackWait = time.Second
	ctx := testwait.Context(t, testwait.Long)
	raw, err := e.js.CreateOrUpdateConsumer(ctx, e.stream, jetstream.ConsumerConfig{Durable: e.consumer,
		AckPolicy: jetstream.AckExplicitPolicy, AckWait: ackWait, MaxDeliver: -1})
	if err != nil {
		t.Fatal(err)
	}
	e.publish("crashes its consumer", "")
	for want := uint64(1); want <= 2; want++ {
		var got jetstream.Msg
		testwait.Until(t, time.Minute, "a delivery to the bare client", func() bool {
			b, err := raw.Fetch(1, jetstream.FetchMaxWait(2*time.Second))
			if err != nil {
				t.Fatal(err)
			}
			for m := range b.Messages() {
				got = m
			}
			return got != nil
		})
		meta, err := got.Metadata()
		if err != nil {
			t.Fatal(err)
		}
		if meta.NumDelivered != want {
			t.Fatalf("delivery count %d; want %d", meta.NumDelivered, want)
		}
	}
	var calls atomic.Int64
	cfg := e.config(e.url, func(context.Context, *receiver.Message) error { calls.Add(1); return nil })
	cfg.AckWait = ackWait
	cfg.Pipeline.MemoryOnly = true
	cfg.Pipeline.MaxAttempts = 2
	c := newConsumer(t, cfg)
	stop := start(t, c)
	testwait.Until(t, time.Minute, "the third delivery dead-lettered, the consumer drained", func() bool {
		return c.Stats().DeadLetters == 1 && e.drained()
	})
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if n := calls.Load(); n != 0 {
		t.Errorf("handler ran %d times; want 0", n)
	}
	dl := e.deadLetters()
	if len(dl) != 1 || !strings.Contains(dl[0].Header.Get("x-dead-letter-error"), ErrTooManyDeliveries.Error()) ||
		dl[0].Header.Get(copyhdr.Attempts) != "3" {
		t.Fatalf("dead letters %+v; want one record of the third delivery naming ErrTooManyDeliveries", dl)
	}
}

// TestConsumerRecreated: the durable consumer deleted while the consumer
// runs (by an operator, or with a server's memory storage) is created
// again, and the messages published after are handled.
func TestConsumerRecreated(t *testing.T) {
	e := newEnv(t, 0)
	var calls counter
	cfg := e.config(e.url, func(ctx context.Context, m *receiver.Message) error {
		calls.add(string(m.Body))
		return nil
	})
	cfg.Pipeline.MemoryOnly = true
	c := newConsumer(t, cfg)
	stop := start(t, c)
	e.publish("before", "")
	testwait.Until(t, time.Minute, "the first message handled", func() bool { return calls.get("before") == 1 })
	ctx := testwait.Context(t, testwait.Long)
	if err := e.js.DeleteConsumer(ctx, e.stream, e.consumer); err != nil {
		t.Fatal(err)
	}
	e.publish("after", "")
	testwait.Until(t, time.Minute, "the message published after the deletion handled", func() bool { return calls.get("after") >= 1 })
	if err := stop(); err != nil {
		t.Fatal(err)
	}
}

// TestConsumerRecreatedBetweenPulls: the durable consumer deleted while no
// pull request of the consumer is waiting (its one place taken by a
// handler), so that the next pull request finds no one to answer it
// (JetStream's 503, no responders) instead of being told the consumer was
// deleted: it is created again all the same, and a message published
// after the deletion is handled.
func TestConsumerRecreatedBetweenPulls(t *testing.T) {
	e := newEnv(t, 0)
	var calls counter
	started := make(chan struct{}, 1)
	release := make(chan struct{})
	cfg := e.config(e.url, func(ctx context.Context, m *receiver.Message) error {
		calls.add(string(m.Body))
		if string(m.Body) == "before" {
			select {
			case started <- struct{}{}:
			default:
			}
			<-release
		}
		return nil
	})
	cfg.Concurrency, cfg.InFlight = 1, 1
	cfg.Pipeline.MemoryOnly = true
	c := newConsumer(t, cfg)
	stop := start(t, c)
	e.publish("before", "")
	select {
	case <-started:
	case <-time.After(time.Minute):
		t.Fatal("the first message was not handed to the handler within a minute")
	}
	ctx := testwait.Context(t, testwait.Long)
	if err := e.js.DeleteConsumer(ctx, e.stream, e.consumer); err != nil {
		t.Fatal(err)
	}
	close(release)
	e.publish("after", "")
	testwait.Until(t, time.Minute, "the message published after the deletion handled", func() bool { return calls.get("after") >= 1 })
	if err := stop(); err != nil {
		t.Fatal(err)
	}
}
