package rabbitconsumer

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/acemq/msgaudit/idempotency"
	"github.com/acemq/msgaudit/idempotency/redisstore"
	"github.com/acemq/msgaudit/receiver"
	amqp "github.com/rabbitmq/amqp091-go"
)

// ledger records every applied message; applying one twice is the bug the
// test looks for.
type ledger struct {
	mu      sync.Mutex
	applied map[string]int
	n       int
	rng     *rand.Rand
	failP   float64
	fails   int
	onCount map[int]func() // called (in a goroutine) when n reaches the key
}

func (l *ledger) handle(ctx context.Context, m *receiver.Message) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.rng.Float64() < l.failP {
		l.fails++
		return errors.New("injected handler failure")
	}
	l.applied[m.Key]++
	if l.applied[m.Key] == 1 {
		l.n++
		if f := l.onCount[l.n]; f != nil {
			go f()
		}
	}
	return nil
}

func (l *ledger) distinct() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.n
}

// TestExactlyOnce: 3,000 messages, 10% handler failures (requeued), the
// connection cut twice mid-stream through a TCP proxy, two competing
// consumers sharing the Redis store — every message applied exactly once,
// none lost, the queue empty at the end.
func TestExactlyOnce(t *testing.T) {
	const total = 3000
	b := newBroker(t)
	rc := redisClient(t)
	q := b.queue("msgaudit-eo-")
	prefix := randomName(t, "msgaudit:test:") + ":"
	t.Cleanup(func() { deletePrefix(t, rc, prefix) })
	store, err := redisstore.New(context.Background(), rc, redisstore.Options{Options: idempotency.Options{ClaimTTL: time.Minute}, Prefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	px := newProxy(t, b.hostPort(), nil)

	var cuts atomic.Int32
	cut := func() {
		n := px.Cut()
		cuts.Add(1)
		t.Logf("cut %d client connections", n)
	}
	l := &ledger{applied: map[string]int{}, rng: rand.New(rand.NewPCG(1, 2)), failP: 0.10,
		onCount: map[int]func(){total / 3: cut, 2 * total / 3: cut}}

	// The queue is filled first, so the consumers run with full prefetch
	// buffers and every cut sends back up to Prefetch deliveries per
	// consumer as redeliveries.
	runID := randomName(t, "")
	b.publishMany(q, total, func(i int) amqp.Publishing {
		return amqp.Publishing{MessageId: fmt.Sprintf("%s-%04d", runID, i), Body: []byte(fmt.Sprint(i))}
	})

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	start := time.Now()
	consumers := make([]*Consumer, 2)
	var wg sync.WaitGroup
	runErr := make([]error, len(consumers))
	for i := range consumers {
		c, err := New(Config{
			URL:              b.via("amqp", px.Addr()),
			Queue:            q,
			Handler:          l.handle,
			Prefetch:         50,
			Concurrency:      4,
			ReconnectBackoff: receiver.Backoff{Initial: 10 * time.Millisecond, Max: 200 * time.Millisecond},
			ConnectionName:   fmt.Sprintf("msgaudit-test-%d", i),
			Pipeline:         receiver.Config{MaxAttempts: 100, Store: store, Backoff: receiver.Backoff{Initial: 2 * time.Millisecond, Max: 2 * time.Millisecond}},
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

	// Wait until every message is applied, then until the broker has
	// nothing left to deliver (redeliveries of messages whose ack a cut
	// lost are absorbed as duplicates) and the consumers are quiet.
	deadline := time.Now().Add(2 * time.Minute)
	for l.distinct() < total {
		if time.Now().After(deadline) {
			t.Fatalf("only %d of %d messages applied", l.distinct(), total)
		}
		time.Sleep(10 * time.Millisecond)
	}
	elapsed := time.Since(start)
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
	waitGroup(t, &wg, time.Minute, "both consumers' Run returning after cancel")
	for i, err := range runErr {
		if err != nil {
			t.Errorf("consumer %d Run: %v", i, err)
		}
	}

	// Every message applied exactly once.
	l.mu.Lock()
	if len(l.applied) != total {
		t.Errorf("%d distinct messages applied; want %d", len(l.applied), total)
	}
	for k, n := range l.applied {
		if n != 1 {
			t.Errorf("message %s applied %d times", k, n)
		}
	}
	fails := l.fails
	l.mu.Unlock()
	if n := b.ready(q); n != 0 {
		t.Errorf("queue holds %d messages at the end; want 0", n)
	}
	if n := b.ready(q + defaultDeadLetterSuffix); n != 0 {
		t.Errorf("dead-letter queue holds %d messages; want 0", n)
	}
	if cuts.Load() != 2 {
		t.Errorf("%d cuts; want 2", cuts.Load())
	}

	var m receiver.Snapshot
	var st receiver.TransportStats
	for _, c := range consumers {
		s := c.Metrics().Snapshot()
		m.Delivered += s.Delivered
		m.Redelivered += s.Redelivered
		m.Processed += s.Processed
		m.DuplicatesAudit += s.DuplicatesAudit
		m.DuplicatesStore += s.DuplicatesStore
		m.DuplicatesInFlight += s.DuplicatesInFlight
		m.DuplicatesOther += s.DuplicatesOther
		m.HandlerErrors += s.HandlerErrors
		m.Retries += s.Retries
		cs := c.Stats()
		st.Reconnects += cs.Reconnects
		st.Requeues += cs.Requeues
		st.Dropped += cs.Dropped
		st.StaleAcks += cs.StaleAcks
		st.Acks += cs.Acks
		st.DeadLetters += cs.DeadLetters
	}
	if st.Reconnects < 2 {
		t.Errorf("%d reconnects; the cuts should force at least 2", st.Reconnects)
	}
	if m.Processed != total {
		t.Errorf("receiver processed %d; want %d", m.Processed, total)
	}
	if int(m.HandlerErrors) != fails {
		t.Errorf("receiver counted %d handler errors; the handler failed %d times", m.HandlerErrors, fails)
	}
	if st.DeadLetters != 0 {
		t.Errorf("%d dead letters; want 0", st.DeadLetters)
	}
	t.Logf("messages=%d deliveries=%d redelivered=%d processed=%d handler-failures=%d requeues=%d",
		total, m.Delivered, m.Redelivered, m.Processed, fails, st.Requeues)
	t.Logf("duplicates absorbed=%d (memory=%d store=%d in-flight-requeued=%d other=%d) dropped=%d stale-acks=%d reconnects=%d acks=%d",
		m.DuplicatesAudit+m.DuplicatesStore+m.DuplicatesOther, m.DuplicatesAudit, m.DuplicatesStore, m.DuplicatesInFlight,
		m.DuplicatesOther, st.Dropped, st.StaleAcks, st.Reconnects, st.Acks)
	t.Logf("all applied in %v: %.0f msg/s", elapsed.Round(time.Millisecond), float64(total)/elapsed.Seconds())
}

// TestCutDropsPrefetched: no store, a large prefetch and a slow handler,
// and the connection cut while most of the prefetch is still unprocessed.
// The broker requeues all of it (amqp091 drops what it buffered; what a
// worker still receives from the dead channel is dropped and counted).
// None of those deliveries ran, so none may look like a duplicate of
// itself when it comes back: with only the in-memory audit to go by,
// every message must be applied exactly once.
func TestCutDropsPrefetched(t *testing.T) {
	t.Parallel()
	const total, cutAt = 300, 20
	b := newBroker(t)
	q := b.queue("msgaudit-cutpf-")
	px := newProxy(t, b.hostPort(), nil)
	runID := randomName(t, "")
	b.publishMany(q, total, func(i int) amqp.Publishing {
		return amqp.Publishing{MessageId: fmt.Sprintf("%s-%04d", runID, i), Body: []byte(fmt.Sprint(i))}
	})
	var cuts atomic.Int32
	l := &ledger{applied: map[string]int{}, rng: rand.New(rand.NewPCG(1, 2)),
		onCount: map[int]func(){cutAt: func() { cuts.Add(int32(px.Cut())) }}}
	c, err := New(Config{
		URL:         b.via("amqp", px.Addr()),
		Queue:       q,
		Prefetch:    total,
		Concurrency: 1,
		Handler: func(ctx context.Context, m *receiver.Message) error {
			time.Sleep(5 * time.Millisecond) // slow: the prefetch waits behind it
			return l.handle(ctx, m)
		},
		ReconnectBackoff: receiver.Backoff{Initial: 10 * time.Millisecond, Max: 100 * time.Millisecond},
		Pipeline:         receiver.Config{MemoryOnly: true},
	})
	if err != nil {
		t.Fatal(err)
	}
	stop := runConsumer(t, c)
	// Not fatal when it runs out: the checks below say what went wrong.
	if !eventually(time.Minute, func() bool { return l.distinct() >= total }) {
		t.Errorf("timed out after a minute: only %d of %d messages applied", l.distinct(), total)
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	l.mu.Lock()
	lost := 0
	for i := range total {
		if l.applied[fmt.Sprintf("%s-%04d", runID, i)] == 0 {
			lost++
		}
	}
	for k, n := range l.applied {
		if n != 1 {
			t.Errorf("message %s applied %d times", k, n)
		}
	}
	l.mu.Unlock()
	if lost > 0 {
		t.Errorf("lost: %d of %d messages never applied", lost, total)
	}
	m, st := c.Metrics().Snapshot(), c.Stats()
	if cuts.Load() == 0 || st.Reconnects == 0 {
		t.Fatalf("cut %d connections, %d reconnects: the cut did not happen", cuts.Load(), st.Reconnects)
	}
	if m.Redelivered == 0 {
		t.Errorf("%d redeliveries after the cut: the prefetch was not outstanding when it came", m.Redelivered)
	}
	if m.DuplicatesAudit > 0 && m.DuplicatesAudit >= m.Redelivered {
		t.Errorf("%d of %d redeliveries taken as audit duplicates: deliveries that never ran left a mark", m.DuplicatesAudit, m.Redelivered)
	}
	if n := b.ready(q); n != 0 {
		t.Errorf("queue holds %d messages at the end", n)
	}
	t.Logf("delivered=%d redelivered=%d processed=%d dup(audit=%d in-flight=%d) dropped=%d stale-acks=%d forgotten=%d reconnects=%d",
		m.Delivered, m.Redelivered, m.Processed, m.DuplicatesAudit, m.DuplicatesInFlight, st.Dropped, st.StaleAcks, m.Forgotten, st.Reconnects)
}
