package stompconsumer

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"github.com/acemq/msgaudit/internal/testkit/logbuf"
	"net"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/acemq/msgaudit/internal/testkit/tcpproxy"
	"github.com/acemq/msgaudit/receiver"
)

// stompFrames splits what a STOMP client sends into frames for a
// tcpproxy filter: a frame runs up to its NUL, and an end of line between
// frames (a heart-beat) is a frame of its own, so it is forwarded at once.
// A body holding a NUL is split in two, which only matters to a filter
// that looks at the second piece.
func stompFrames(data []byte, atEOF bool) (int, []byte, error) {
	switch {
	case len(data) == 0:
		return 0, nil, nil
	case data[0] == '\n':
		return 1, data[:1], nil
	case data[0] == '\r' && len(data) > 1 && data[1] == '\n':
		return 2, data[:2], nil
	}
	if i := bytes.IndexByte(data, 0); i >= 0 {
		return i + 1, data[:i+1], nil
	}
	if atEOF {
		return len(data), data, nil
	}
	return 0, nil, nil
}

// TestRetryCommitLost: the retry of a failed delivery (its copy and the
// ACK of the original in one transaction) is lost on the way: the broker
// never gets the first COMMIT, the consumer waits for the receipt in vain
// and drops the connection. The broker rolls the transaction back, ACK
// included, so the original comes back and is applied once. An ACK sent
// outside the transaction would have taken effect, and with the copy
// rolled back the message would be gone.
func TestRetryCommitLost(t *testing.T) {
	addr := stompAddr(t)
	q := "/queue/" + uniq("msgaudit.commitlost")
	tag := uniq("tag")
	const n = 3
	produce(t, addr, q, tag, n, nil)
	var commits, dropped atomic.Int64
	px, err := tcpproxy.New(addr, tcpproxy.Options{Split: stompFrames, Filter: func(f []byte) tcpproxy.Verdict {
		if !bytes.HasPrefix(f, []byte("COMMIT\n")) && !bytes.HasPrefix(f, []byte("COMMIT\r\n")) {
			return tcpproxy.Forward
		}
		if commits.Add(1) == 1 {
			dropped.Add(1)
			return tcpproxy.Drop
		}
		return tcpproxy.Forward
	}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(px.Close)
	l := newLedger()
	h := l.handler(0, 0)
	var failed atomic.Bool
	c, err := New(Config{
		Addresses:             []string{px.Addr()},
		CopySecret:            []byte("commit-lost test copy secret"), // retries are copies
		DeadLetterDestination: noDeadLetters(t, addr),
		// go-stomp waits for a COMMIT's receipt for the heart-beat
		// interval less 5s: 1s here.
		Heartbeat:        6 * time.Second,
		ReconnectBackoff: receiver.Backoff{Initial: time.Millisecond, Max: 10 * time.Millisecond},
		Subscriptions: []Subscription{{Destination: q, Handler: func(ctx context.Context, m *receiver.Message) error {
			if string(m.Body) == "0" && failed.CompareAndSwap(false, true) {
				return errors.New("first attempt fails: retried through a copy")
			}
			return h(ctx, m)
		}}},
		Pipeline: receiver.Config{MemoryOnly: true, Backoff: receiver.Backoff{Initial: time.Millisecond, Max: 5 * time.Millisecond}}})
	if err != nil {
		t.Fatal(err)
	}
	stop := runConsumer(t, c)
	// Not fatal when it runs out: verify names what is missing.
	if !eventually(60*time.Second, func() bool { return l.count() == n }) {
		t.Errorf("timed out after 60s: %d of %d messages applied (stats %+v)", l.count(), n, c.Stats())
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	l.verify(t, n)
	s := c.Stats()
	if dropped.Load() != 1 || !failed.Load() {
		t.Fatalf("the test did not test its case: %d COMMITs dropped, first attempt failed: %t", dropped.Load(), failed.Load())
	}
	if s.AckErrors == 0 || s.Reconnects == 0 {
		t.Errorf("stats %+v: want the lost commit to end the connection (an ack error, a reconnect)", s)
	}
	if left := drain(t, addr, q, 300*time.Millisecond); len(left) != 0 {
		t.Errorf("queue not empty: %v", left)
	}
	checkBrokerDLQ(t, addr, q)
	t.Logf("COMMITs seen %d, stats %+v", commits.Load(), s)
}

// failedAddresses returns the address of each failed connect attempt in
// a debug log, in order.
func failedAddresses(log string) []string {
	var out []string
	for _, m := range failedAttempt.FindAllStringSubmatch(log, -1) {
		out = append(out, m[1])
	}
	return out
}

var failedAttempt = regexp.MustCompile(`msg="stompconsumer: connect failed[^"]*" address=tcp://(\S+)`)

// closedPort returns a loopback address nothing listens on.
func closedPort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

// TestConnectRotates: the first address does not answer (a refused port,
// or a broker that accepts and drops every connection, as a slave does
// while the master runs) and the second is the broker. The consumer moves
// on to the second address and consumes; it must not spend its attempts
// on the first.
func TestConnectRotates(t *testing.T) {
	addr := stompAddr(t)
	for _, tt := range []struct {
		name  string
		first func(t *testing.T) string
	}{
		{"refused", closedPort},
		{"dropped", func(t *testing.T) string {
			px := newProxy(t, addr)
			px.SetDown(true)
			return px.Addr()
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			q := "/queue/" + uniq("msgaudit.rotate")
			tag := uniq("tag")
			const n = 20
			produce(t, addr, q, tag, n, nil)
			first := tt.first(t)
			l := newLedger()
			var logs logbuf.Buffer
			c, err := New(Config{
				Addresses:             []string{first, addr},
				DeadLetterDestination: noDeadLetters(t, addr),
				ConnectRetries:        3,
				ReconnectBackoff:      receiver.Backoff{Initial: 50 * time.Millisecond, Max: 100 * time.Millisecond},
				Subscriptions:         []Subscription{{Destination: q, Handler: l.handler(0, 0)}},
				Pipeline:              receiver.Config{Logger: debugLogger(&logs), MemoryOnly: true}})
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { done <- c.Run(ctx) }()
			ok := eventually(30*time.Second, func() bool {
				select {
				case err := <-done:
					done <- err
					return true
				default:
				}
				return l.count() == n
			})
			cancel()
			err, _ = recv(t, done, 60*time.Second, "Run to return")
			if err != nil {
				t.Fatalf("Run = %v; want it to connect to the second address %s and consume (logs:\n%s)", err, addr, logs.String())
			}
			if !ok {
				t.Fatalf("timed out after 30s: %d of %d messages applied, stats %+v", l.count(), n, c.Stats())
			}
			l.verify(t, n)
			// On an idle machine the first attempt fails and the second
			// connects. On a loaded one an attempt on the broker may time
			// out too; what must hold is the rotation: every failed
			// attempt is followed by one on the other address.
			failed := failedAddresses(logs.String())
			if s := c.Stats(); s.Connects != 1 || s.ConnectErrors == 0 || s.ConnectErrors != uint64(len(failed)) {
				t.Errorf("stats %+v, failed attempts logged %v: want one connection after at least one failed attempt, each logged", s, failed)
			}
			if len(failed) == 0 || failed[0] != first {
				t.Errorf("failed attempts %v: want the first on %s\n%s", failed, first, logs.String())
			}
			for i, a := range failed {
				if want := []string{first, addr}[i%2]; a != want {
					t.Errorf("failed attempt %d on %s, want %s: the consumer does not rotate (attempts %v)\n%s", i+1, a, want, failed, logs.String())
					break
				}
			}
		})
	}
}

// comingBroker listens on loopback until the test ends. While up is false
// it closes every connection at once, before CONNECTED, like a port that
// refuses; once up is set it answers CONNECT, takes SUBSCRIBE and answers
// every receipt, so a consumer connects and stops cleanly. It counts the
// connections refused and served.
type comingBroker struct {
	addr            string
	up              atomic.Bool
	refused, served atomic.Int64
}

func newComingBroker(t *testing.T) *comingBroker {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	b := &comingBroker{addr: ln.Addr().String()}
	receipt := regexp.MustCompile(`(?m)^receipt:([^\r\n]*)`)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			if !b.up.Load() {
				b.refused.Add(1)
				c.Close()
				continue
			}
			b.served.Add(1)
			go func() {
				defer c.Close()
				r := bufio.NewReader(c)
				if _, err := r.ReadBytes(0); err != nil {
					return
				}
				_, _ = c.Write([]byte("CONNECTED\nversion:1.2\nheart-beat:0,0\n\n\x00"))
				for {
					f, err := r.ReadBytes(0)
					if err != nil {
						return
					}
					if m := receipt.FindSubmatch(f); m != nil {
						_, _ = c.Write([]byte("RECEIPT\nreceipt-id:" + string(m[1]) + "\n\n\x00"))
					}
				}
			}()
		}
	}()
	return b
}

// TestConnectForeverByDefault: with ConnectRetries unset the consumer
// keeps trying while the broker refuses (here 200 attempts over at least
// 2 s, far past any bound), then connects once the broker appears.
func TestConnectForeverByDefault(t *testing.T) {
	t.Parallel()
	b := newComingBroker(t)
	c, err := New(Config{
		Addresses:        []string{b.addr},
		Heartbeat:        -1,
		ReconnectBackoff: receiver.Backoff{Initial: time.Millisecond, Max: 5 * time.Millisecond},
		Subscriptions:    []Subscription{{Destination: "/queue/x", Handler: nopHandler}},
		Pipeline:         receiver.Config{MemoryOnly: true}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	start := time.Now()
	for c.Stats().ConnectErrors < 200 || time.Since(start) < 2*time.Second {
		select {
		case err := <-done:
			t.Fatalf("Run = %v after %d failed attempts while the broker refused; want it to keep trying", err, c.Stats().ConnectErrors)
		case <-time.After(10 * time.Millisecond):
		}
		if time.Since(start) > 30*time.Second {
			t.Fatalf("only %d failed attempts in 30s", c.Stats().ConnectErrors)
		}
	}
	b.up.Store(true)
	if !eventually(10*time.Second, func() bool { return c.Stats().Connects == 1 }) {
		t.Fatalf("not connected 10s after the broker appeared: stats %+v", c.Stats())
	}
	cancel()
	if err, _ := recv(t, done, 30*time.Second, "Run to return"); err != nil {
		t.Fatalf("Run = %v", err)
	}
	if s := c.Stats(); s.ConnectErrors != uint64(b.refused.Load()) || b.served.Load() != 1 {
		t.Errorf("stats %+v; broker refused %d, served %d: want every refusal counted and one connection", s, b.refused.Load(), b.served.Load())
	}
}

// TestConnectRetriesBound: ConnectRetries n gives up after exactly n+1
// attempts, with ErrConnect saying so.
func TestConnectRetriesBound(t *testing.T) {
	t.Parallel()
	for _, n := range []int{1, 3} {
		b := newComingBroker(t)
		c, err := New(Config{
			Addresses:        []string{b.addr},
			ConnectRetries:   n,
			ReconnectBackoff: receiver.Backoff{Initial: time.Millisecond, Max: 5 * time.Millisecond},
			Subscriptions:    []Subscription{{Destination: "/queue/x", Handler: nopHandler}},
			Pipeline:         receiver.Config{MemoryOnly: true}})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		err = runFor(ctx, t, c)
		cancel()
		if !errors.Is(err, ErrConnect) || !strings.Contains(err.Error(), "after "+strconv.Itoa(n+1)+" attempts") {
			t.Fatalf("ConnectRetries %d: Run = %v after %d refused attempts; want ErrConnect after %d attempts", n, err, b.refused.Load(), n+1)
		}
		if got := b.refused.Load(); got != int64(n+1) || c.Stats().ConnectErrors != uint64(n+1) {
			t.Errorf("ConnectRetries %d: %d attempts reached the broker, %d counted; want %d", n, got, c.Stats().ConnectErrors, n+1)
		}
	}
}
