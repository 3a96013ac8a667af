package stompconsumer

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"github.com/acemq/msgaudit/internal/testkit/logbuf"
	"log/slog"
	"net"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/acemq/msgaudit/receiver"
)

// TestStuckAckDoesNotHangRun: ACKs blocked in go-stomp v3.1.3 for good
// do not keep Run from returning. A fake broker delivers messages whose
// ack headers are 64 KiB each and then reads nothing more: the ACKs fill
// the socket, go-stomp's connection loop blocks writing, its write queue
// fills, and one ACK blocks on that queue while holding the connection's
// lock, the others waiting for the lock.
//
//   - connection lost: the broker then closes the connection. The loop's
//     write fails and the loop exits into its deferred MustDisconnect,
//     which waits for that lock for good, and so do the blocked ACKs (the
//     deadlock). Run must reconnect and, after its ctx is cancelled,
//     return.
//   - broker stalled: the connection stays open, and Run's ctx is
//     cancelled while the ACKs are blocked; Run must return.
//
// Either way Run returns within ShutdownTimeout plus the bound it gives
// workers stuck in go-stomp, saying how many it abandoned.
func TestStuckAckDoesNotHangRun(t *testing.T) {
	t.Run("connection lost", func(t *testing.T) { stuckAcks(t, true) })
	t.Run("broker stalled", func(t *testing.T) { stuckAcks(t, false) })
}

func stuckAcks(t *testing.T, lose bool) {
	const n = 200
	const shutdown = 200 * time.Millisecond
	ackValue := strings.Repeat("a", 64<<10)
	cut := make(chan struct{})
	var cutOnce sync.Once
	closeConn := func() { cutOnce.Do(func() { close(cut) }) }
	t.Cleanup(closeConn)
	first := make(chan struct{}, 1)
	first <- struct{}{}
	addr, _ := fakeBroker(t, "CONNECTED\nversion:1.2\nheart-beat:0,0\n\n\x00", func(c net.Conn, r *bufio.Reader) {
		if _, err := r.ReadBytes(0); err != nil { // SUBSCRIBE
			return
		}
		select {
		case <-first:
		default:
			answerDisconnect(c, r) // the connections after the first
			return
		}
		// A small receive buffer that does not grow: the ACKs fill it
		// soon, on any machine.
		_ = c.(*net.TCPConn).SetReadBuffer(64 << 10)
		var b bytes.Buffer
		for i := range n {
			b.Reset()
			fmt.Fprintf(&b, "MESSAGE\nsubscription:msgaudit-0\ndestination:/queue/stuck\nmessage-id:ID:stuck-41234-1700000000000-1:1:1:1:%d\nack:%d-%s\n\nbody %d\x00", i+1, i, ackValue, i)
			if _, err := c.Write(b.Bytes()); err != nil {
				return
			}
		}
		<-cut // never reads again; closed on return
	})

	started := make(chan struct{}, n)
	release := make(chan struct{})
	var logs logbuf.Buffer
	c, err := New(Config{
		Addresses:        []string{addr},
		Heartbeat:        -1,
		Prefetch:         n,
		Concurrency:      n,
		MaxHeaderBytes:   256 << 10,
		ShutdownTimeout:  shutdown,
		ReconnectBackoff: receiver.Backoff{Initial: 10 * time.Millisecond, Max: 10 * time.Millisecond},
		Subscriptions: []Subscription{{Destination: "/queue/stuck", Handler: func(ctx context.Context, m *receiver.Message) error {
			started <- struct{}{}
			blockUntil(ctx, t, release, 30*time.Second, "the release of the handlers")
			return nil
		}}},
		Pipeline: receiver.Config{MemoryOnly: true,
			Logger: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelInfo}))},
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()

	// Every delivery is in a handler before any ACK is sent, so that
	// enough ACKs follow each other to fill the socket and the queue.
	for i := range n {
		recv(t, started, 30*time.Second, fmt.Sprintf("handler %d of %d to start", i+1, n))
	}
	close(release)
	waitFor(t, 30*time.Second, "an ACK blocked on go-stomp's full write queue", func() bool {
		return blockedIn("chan send", "go-stomp/stomp/v3.(*Conn).sendFrame") > 0
	})
	if lose {
		closeConn()
		waitFor(t, 30*time.Second, "the reconnect", func() bool { return c.Stats().Connects == 2 })
		// The reader that saw the connection end failed the session: that
		// must not wait for go-stomp's lock either.
		waitFor(t, 10*time.Second, "the lost session's fail to return", func() bool {
			return blockedIn("", "stompconsumer.(*session).fail") == 0
		})
	}
	cancel()
	const bound = shutdown + stuckWait + 5*time.Second
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run = %v", err)
		}
	case <-time.After(bound):
		t.Fatalf("Run did not return within %v of cancel: %d goroutines blocked in go-stomp's sendFrame\n%s",
			bound, blockedIn("", "go-stomp/stomp/v3.(*Conn).sendFrame"), logs.String())
	}
	if !strings.Contains(logs.String(), "stuck in a go-stomp call") {
		t.Errorf("no log line on the abandoned workers:\n%s", logs.String())
	}
}

// answerDisconnect reads frames until the consumer's DISCONNECT and
// answers its receipt.
func answerDisconnect(c net.Conn, r *bufio.Reader) {
	for {
		f, err := r.ReadBytes(0)
		if err != nil {
			return
		}
		f = bytes.TrimLeft(f, "\r\n")
		if !bytes.HasPrefix(f, []byte("DISCONNECT\n")) {
			continue
		}
		for _, line := range strings.Split(string(f), "\n") {
			if id, ok := strings.CutPrefix(line, "receipt:"); ok {
				_, _ = c.Write([]byte("RECEIPT\nreceipt-id:" + id + "\n\n\x00"))
			}
		}
	}
}

// blockedIn counts the goroutines whose state starts with state and whose
// stack holds fn.
func blockedIn(state, fn string) int {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	count := 0
	for _, g := range strings.Split(string(buf), "\n\n") {
		header, _, _ := strings.Cut(g, "\n")
		if strings.Contains(header, "["+state) && strings.Contains(g, fn) {
			count++
		}
	}
	return count
}
