package brokermodel_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/acemq/msgaudit/cmd/msgaudit/internal/brokermodel"
	"github.com/acemq/msgaudit/internal/testkit/testwait"
	"github.com/acemq/msgaudit/msgid"
)

const q = "/queue/orders"

func fixedClock() time.Time { return time.UnixMilli(1_796_041_229_942) }

func newBroker(t *testing.T) *brokermodel.Broker {
	t.Helper()
	b := brokermodel.New(brokermodel.Options{Host: "vm", Port: 40067, Clock: fixedClock})
	t.Cleanup(b.Close)
	return b
}

func mustConn(t *testing.T, b *brokermodel.Broker) *brokermodel.Conn {
	t.Helper()
	c, err := b.Connect()
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func send(t *testing.T, c *brokermodel.Conn, dest, body string, persistent bool) string {
	t.Helper()
	id, err := c.Send(dest, []byte(body), brokermodel.SendOptions{Persistent: persistent})
	if err != nil {
		t.Fatal(err)
	}
	return id
}

func recv(t *testing.T, s *brokermodel.Subscription) *brokermodel.Delivery {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	d, err := s.Receive(ctx)
	if err != nil {
		t.Fatalf("no delivery within 10s: %v", err)
	}
	return d
}

func TestMessageIDs(t *testing.T) {
	t.Parallel()
	b := newBroker(t)
	p1, p2 := mustConn(t, b), mustConn(t, b)
	a1 := send(t, p1, "/queue/a", "a1", false)
	b1 := send(t, p1, "/queue/b", "b1", false)
	a2 := send(t, p1, "/queue/a", "a2", false)
	x1 := send(t, p2, "/queue/a", "x1", false)
	ids := []string{a1, b1, a2, x1}
	want := []struct {
		key string
		seq uint64
	}{{"ID:vm-40067-1796041229942-0:1", 1}, {"ID:vm-40067-1796041229942-0:1", 2}, {"ID:vm-40067-1796041229942-0:1", 3},
		{"ID:vm-40067-1796041229942-0:2", 1}}
	for i, id := range ids {
		p, err := msgid.Parse(id)
		if err != nil {
			t.Fatal(err)
		}
		if p.Key != want[i].key || p.Seq != want[i].seq {
			t.Errorf("id %d = %s, want %s:%d (one producer per connection, sequence shared across destinations)",
				i, id, want[i].key, want[i].seq)
		}
	}
}

func TestHeadersSurviveAndMessageIDIsOverwritten(t *testing.T) {
	t.Parallel()
	b := newBroker(t)
	c := mustConn(t, b)
	id, err := c.Send(q, []byte("x"), brokermodel.SendOptions{Persistent: true,
		Headers: map[string]string{"message-id": "mine", "x-idem-key": "K-1", "empty": ""}})
	if err != nil {
		t.Fatal(err)
	}
	s, _ := c.Subscribe(q, 1)
	d := recv(t, s)
	if d.MessageID != id || id == "mine" || d.Headers["message-id"] != "" || d.Headers["x-idem-key"] != "K-1" ||
		d.Headers["empty"] != "" || !d.Persistent || string(d.Body) != "x" || !d.Timestamp.Equal(fixedClock()) {
		t.Fatalf("delivery %+v", d)
	}
	if _, ok := d.Headers["empty"]; !ok {
		t.Fatal("empty header lost")
	}
}

func TestPrefetch(t *testing.T) {
	t.Parallel()
	b := newBroker(t)
	c := mustConn(t, b)
	for i := range 5 {
		send(t, c, q, fmt.Sprint(i), false)
	}
	s, err := c.Subscribe(q, 2)
	if err != nil {
		t.Fatal(err)
	}
	if p, f := b.Depth(q); p != 3 || f != 2 {
		t.Fatalf("depth pending=%d inflight=%d, want 3, 2", p, f)
	}
	d := recv(t, s)
	if p, f := b.Depth(q); p != 3 || f != 2 {
		t.Fatalf("receiving does not free prefetch: %d %d", p, f)
	}
	if err := c.Ack(d); err != nil {
		t.Fatal(err)
	}
	if p, f := b.Depth(q); p != 2 || f != 2 {
		t.Fatalf("after ack: %d %d", p, f)
	}
	s2, _ := c.Subscribe(q, 0)
	_ = s2
	if p, f := b.Depth(q); p != 0 || f != 4 {
		t.Fatalf("default prefetch takes the rest: %d %d", p, f)
	}
}

// TestRedeliveryOnDisconnect: close, cut and unsubscribe all redeliver
// every unacked delivery — prefetched ones the application never received
// included — in order, with the same id, a new ack id and Redelivered.
func TestRedeliveryOnDisconnect(t *testing.T) {
	t.Parallel()
	for _, how := range []string{"close", "cut", "unsubscribe"} {
		t.Run(how, func(t *testing.T) {
			t.Parallel()
			b := newBroker(t)
			p := mustConn(t, b)
			ids := []string{send(t, p, q, "0", false), send(t, p, q, "1", false), send(t, p, q, "2", false), send(t, p, q, "3", false)}
			c := mustConn(t, b)
			s, _ := c.Subscribe(q, 10)
			first := recv(t, s)
			if first.Redelivered {
				t.Fatal("first delivery marked redelivered")
			}
			second := recv(t, s)
			if err := c.Ack(second); err != nil {
				t.Fatal(err)
			}
			switch how {
			case "close":
				if err := c.Close(); err != nil {
					t.Fatal(err)
				}
			case "cut":
				if !b.Cut(c) || !c.Closed() || b.Cut(c) {
					t.Fatal("cut of a live connection: want true once, then Closed")
				}
				if err := c.Ack(first); !errors.Is(err, brokermodel.ErrDisconnected) {
					t.Fatalf("ack after cut: %v", err)
				}
				if _, err := s.Receive(testwait.Context(t, testwait.Long)); !errors.Is(err, brokermodel.ErrDisconnected) {
					t.Fatalf("receive after cut: %v", err)
				}
			case "unsubscribe":
				if err := s.Unsubscribe(); err != nil {
					t.Fatal(err)
				}
			}
			c2 := mustConn(t, b)
			s2, _ := c2.Subscribe(q, 10)
			for _, want := range []string{ids[0], ids[2], ids[3]} {
				d := recv(t, s2)
				if d.MessageID != want || !d.Redelivered {
					t.Fatalf("got %s redelivered=%v, want %s redelivered", d.MessageID, d.Redelivered, want)
				}
				if d.MessageID == first.MessageID && d.AckID == first.AckID {
					t.Fatal("ack id reused on redelivery")
				}
				if err := c2.Ack(d); err != nil {
					t.Fatal(err)
				}
			}
			if p, f := b.Depth(q); p != 0 || f != 0 {
				t.Fatalf("left %d %d", p, f)
			}
			st := b.Stats()
			if st.Requeued != 3 || st.Acked != 4 {
				t.Fatalf("stats %+v", st)
			}
		})
	}
}

func TestRedeliveryIsUnlimited(t *testing.T) {
	t.Parallel()
	b := newBroker(t)
	id := send(t, mustConn(t, b), q, "x", true)
	for range 12 {
		c := mustConn(t, b)
		s, _ := c.Subscribe(q, 1)
		if d := recv(t, s); d.MessageID != id {
			t.Fatal(d.MessageID)
		}
		c.Close()
	}
	if b.Stats().DeadLettered != 0 || len(b.Browse(brokermodel.DLQ)) != 0 {
		t.Fatal("redelivery reached the DLQ")
	}
}

func TestNackIsPoisonAck(t *testing.T) {
	t.Parallel()
	b := newBroker(t)
	p := mustConn(t, b)
	pid, _ := p.Send(q, []byte("p"), brokermodel.SendOptions{Persistent: true, Headers: map[string]string{"x-idem-key": "k"}})
	send(t, p, q, "n", false)
	c := mustConn(t, b)
	s, _ := c.Subscribe(q, 10)
	for range 2 {
		if err := c.Nack(recv(t, s)); err != nil {
			t.Fatal(err)
		}
	}
	if p, f := b.Depth(q); p != 0 || f != 0 {
		t.Fatalf("a NACK redelivered: %d %d", p, f)
	}
	dlq := b.Browse(brokermodel.DLQ)
	if len(dlq) != 1 || dlq[0].ID != pid || dlq[0].Headers["x-idem-key"] != "k" ||
		dlq[0].Headers[brokermodel.HeaderOriginalDestination] != q || !dlq[0].Persistent {
		t.Fatalf("DLQ %+v (persistent → DLQ with id and headers; non-persistent discarded)", dlq)
	}
	st := b.Stats()
	if st.Nacked != 2 || st.DeadLettered != 1 || st.Discarded != 1 {
		t.Fatalf("stats %+v", st)
	}
	if err := c.Nack(&brokermodel.Delivery{AckID: "nope"}); !errors.Is(err, brokermodel.ErrUnknownAck) {
		t.Fatalf("nack of unknown: %v", err)
	}
}

func TestTransactions(t *testing.T) {
	t.Parallel()
	b := newBroker(t)
	p := mustConn(t, b)
	send(t, p, q, "in", false)
	c := mustConn(t, b)
	s, _ := c.Subscribe(q, 10)
	d := recv(t, s)

	// SEND and ACK commit together.
	tx, _ := c.Begin()
	if _, err := tx.Send("/queue/out", []byte("copy"), brokermodel.SendOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := tx.Ack(d); err != nil {
		t.Fatal(err)
	}
	if p, f := b.Depth("/queue/out"); p != 0 || f != 0 {
		t.Fatal("send visible before commit")
	}
	if _, f := b.Depth(q); f != 1 {
		t.Fatal("ack applied before commit")
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	if p, _ := b.Depth("/queue/out"); p != 1 {
		t.Fatal("send lost on commit")
	}
	if _, f := b.Depth(q); f != 0 {
		t.Fatal("ack lost on commit")
	}
	if err := tx.Commit(); !errors.Is(err, brokermodel.ErrTxDone) {
		t.Fatalf("second commit: %v", err)
	}

	// ABORT of an ACK: the message stays delivered and unacked, a later
	// plain ACK works; aborted SENDs consume sequence numbers.
	send(t, p, q, "in2", false)
	d2 := recv(t, s)
	tx2, _ := c.Begin()
	id1, _ := tx2.Send("/queue/out", []byte("x"), brokermodel.SendOptions{})
	tx2.Ack(d2)
	if err := tx2.Abort(); err != nil {
		t.Fatal(err)
	}
	if p, f := b.Depth(q); p != 0 || f != 1 {
		t.Fatalf("abort redelivered or acked: %d %d", p, f)
	}
	if err := c.Ack(d2); err != nil {
		t.Fatalf("plain ack after abort: %v", err)
	}
	id2, _ := c.Send("/queue/out", []byte("y"), brokermodel.SendOptions{})
	p1, _ := msgid.Parse(id1)
	p2, _ := msgid.Parse(id2)
	if p2.Seq != p1.Seq+1 {
		t.Fatalf("aborted send did not consume its number: %s then %s", id1, id2)
	}

	// A commit whose ACK went stale (connection cut → redelivered) applies
	// nothing.
	s.Unsubscribe()
	send(t, p, q, "in3", false)
	c3 := mustConn(t, b)
	s3, _ := c3.Subscribe(q, 10)
	d3 := recv(t, s3)
	tx3, _ := c3.Begin()
	tx3.Send("/queue/out3", []byte("z"), brokermodel.SendOptions{})
	tx3.Ack(d3)
	s3.Unsubscribe()
	if err := tx3.Commit(); !errors.Is(err, brokermodel.ErrUnknownAck) {
		t.Fatalf("stale commit: %v", err)
	}
	if p, _ := b.Depth("/queue/out3"); p != 0 {
		t.Fatal("stale commit applied its send")
	}
}

func TestReplay(t *testing.T) {
	t.Parallel()
	b := newBroker(t)
	p := mustConn(t, b)
	var ids []string
	for i := range 4 {
		ids = append(ids, send(t, p, q, fmt.Sprint(i), true))
	}
	c := mustConn(t, b)
	s, _ := c.Subscribe(q, 10)
	var ds []*brokermodel.Delivery
	for range 4 {
		ds = append(ds, recv(t, s))
	}
	for _, d := range ds[:3] {
		c.Ack(d) // ds[3] stays in flight
	}
	if n := b.Replay(q, 2, true); n != 2 {
		t.Fatalf("replayed %d", n)
	}
	r1, r2 := recv(t, s), recv(t, s)
	if r1.MessageID != ids[2] || r2.MessageID != ids[3] || !r1.Redelivered || !r2.Redelivered {
		t.Fatalf("replays %s %s", r1.MessageID, r2.MessageID)
	}
	// The original in-flight delivery and its copy are both unacked and
	// both ackable.
	for _, d := range []*brokermodel.Delivery{ds[3], r1, r2} {
		if err := c.Ack(d); err != nil {
			t.Fatal(err)
		}
	}
	if st := b.Stats(); st.Replayed != 2 || st.Sent != 4 {
		t.Fatalf("stats %+v", st)
	}
	if b.Replay("/queue/none", 3, false) != 0 {
		t.Fatal("replay of an unknown queue")
	}
}

func TestRestart(t *testing.T) {
	t.Parallel()
	b := newBroker(t)
	p := mustConn(t, b)
	before := send(t, p, q, "np", false)
	send(t, p, q, "p", true)
	b.Restart()
	if _, err := p.Send(q, nil, brokermodel.SendOptions{}); !errors.Is(err, brokermodel.ErrDisconnected) {
		t.Fatal("connection survived the restart")
	}
	msgs := b.Browse(q)
	if len(msgs) != 1 || string(msgs[0].Body) != "p" {
		t.Fatalf("after restart %+v (persistent kept, non-persistent lost)", msgs)
	}
	after := send(t, mustConn(t, b), q, "n", false)
	k1, _, _ := msgid.Split(before)
	k2, _, _ := msgid.Split(after)
	if k1 == k2 {
		t.Fatalf("producer key reused across a restart: %s", k1)
	}
}

func TestRoundRobinAndHookCut(t *testing.T) {
	t.Parallel()
	var b *brokermodel.Broker
	cutOnce := sync.Once{}
	b = brokermodel.New(brokermodel.Options{OnReceive: func(c *brokermodel.Conn, d *brokermodel.Delivery) {
		if d.Headers["cut"] == "yes" {
			cutOnce.Do(func() { b.Cut(c) })
		}
	}})
	defer b.Close()
	p := mustConn(t, b)
	c1, c2 := mustConn(t, b), mustConn(t, b)
	s1, _ := c1.Subscribe(q, 10)
	s2, _ := c2.Subscribe(q, 10)
	send(t, p, q, "a", false)
	send(t, p, q, "b", false)
	if d1, d2 := recv(t, s1), recv(t, s2); string(d1.Body) != "a" || string(d2.Body) != "b" {
		t.Fatalf("round robin: %s %s", d1.Body, d2.Body)
	}
	p.Send(q, []byte("c"), brokermodel.SendOptions{Headers: map[string]string{"cut": "yes"}})
	d := recv(t, s1) // the hook cuts c1 as the delivery reaches the application
	if err := c1.Ack(d); !errors.Is(err, brokermodel.ErrDisconnected) {
		t.Fatalf("ack after a mid-delivery cut: %v", err)
	}
	var again *brokermodel.Delivery
	for again == nil || string(again.Body) != "c" {
		again = recv(t, s2)
		c2.Ack(again)
	}
	if !again.Redelivered || again.MessageID != d.MessageID {
		t.Fatalf("redelivery %+v", again)
	}
	if b.Stats().Cuts != 1 {
		t.Fatal("cut not counted")
	}
}

func TestBadInput(t *testing.T) {
	t.Parallel()
	b := newBroker(t)
	c := mustConn(t, b)
	for _, dest := range []string{"/topic/t", "orders", "/queue/", ""} {
		if _, err := c.Send(dest, nil, brokermodel.SendOptions{}); !errors.Is(err, brokermodel.ErrDestination) {
			t.Errorf("send %q: %v", dest, err)
		}
		if _, err := c.Subscribe(dest, 1); !errors.Is(err, brokermodel.ErrDestination) {
			t.Errorf("subscribe %q: %v", dest, err)
		}
	}
	c.Close()
	if err := c.Close(); !errors.Is(err, brokermodel.ErrDisconnected) {
		t.Errorf("double close: %v", err)
	}
	b.Close()
	if _, err := b.Connect(); !errors.Is(err, brokermodel.ErrClosed) {
		t.Errorf("connect after close: %v", err)
	}
}

// TestConcurrentAtLeastOnce: producers and consumers race while
// connections are cut; every message is acked at least once and the
// broker ends empty.
func TestConcurrentAtLeastOnce(t *testing.T) {
	t.Parallel()
	b := newBroker(t)
	const producers, per = 4, 250
	var wg sync.WaitGroup
	for range producers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := mustConn(t, b)
			for i := range per {
				if _, err := c.Send(q, []byte(fmt.Sprint(i)), brokermodel.SendOptions{Persistent: true}); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	var mu sync.Mutex
	acked := map[string]int{}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var cwg sync.WaitGroup
	for w := range 3 {
		cwg.Add(1)
		go func() {
			defer cwg.Done()
			for ctx.Err() == nil {
				c, err := b.Connect()
				if err != nil {
					return
				}
				s, _ := c.Subscribe(q, 5+w)
				for n := 0; ; n++ {
					d, err := s.Receive(ctx)
					if err != nil {
						break
					}
					if w == 0 && n == 40 {
						b.Cut(c) // this worker loses its connection now and then
						continue
					}
					if c.Ack(d) == nil {
						mu.Lock()
						acked[d.MessageID]++
						mu.Unlock()
					}
				}
			}
		}()
	}
	testwait.Group(t, &wg, testwait.Long, fmt.Sprintf("the end of the %d producers", producers))
	testwait.Until(t, time.Minute, fmt.Sprintf("acking all %d messages and emptying the queue", producers*per), func() bool {
		mu.Lock()
		n := len(acked)
		mu.Unlock()
		pending, inFlight := b.Depth(q)
		return n == producers*per && pending == 0 && inFlight == 0
	})
	cancel()
	testwait.Group(t, &cwg, testwait.Long, "the end of the 3 consumers after cancel")
	for id, n := range acked {
		if n != 1 {
			t.Errorf("%s acked %d times (an ack is individual: one success per delivery)", id, n)
		}
	}
}
