package stompconsumer

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/acemq/msgaudit/internal/testkit/testenv"
	"github.com/go-stomp/stomp/v3"
	"github.com/go-stomp/stomp/v3/frame"
)

// envOrSkip returns the environment variable, skipping the test when it is
// unset, except under CI=true where a missing service is a failure.
func envOrSkip(t testing.TB, name, what string) string {
	t.Helper()
	return testenv.Getenv(t, name, what)
}

func stompAddr(t testing.TB) string {
	return envOrSkip(t, "MSGAUDIT_STOMP_ADDR", "real ActiveMQ")
}

// testTag marks every message a test produces with the test's tag, so a
// message found where it should not be can be traced to its test.
const testTag = "msgauditTest"

// uniq returns a name unique to this run.
func uniq(prefix string) string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return prefix + "." + hex.EncodeToString(b[:])
}

// rawDial connects a plain go-stomp client (the test's producer and
// inspector).
func rawDial(t testing.TB, addr string) *stomp.Conn {
	t.Helper()
	opts := []func(*stomp.Conn) error{stomp.ConnOpt.AcceptVersion(stomp.V12), stomp.ConnOpt.HeartBeat(0, 0)}
	if user, pass, ok := strings.Cut(os.Getenv("MSGAUDIT_STOMP_AUTH"), ":"); ok {
		opts = append(opts, stomp.ConnOpt.Login(user, pass))
	}
	c, err := stomp.Dial("tcp", addr, opts...)
	if err != nil {
		t.Fatalf("dial %s: %v", addr, err)
	}
	return c
}

// produce sends n persistent messages with bodies "0".."n-1" to dest, in
// transactions of 500 committed with a receipt, each tagged with tag and
// carrying extra headers from hdr(i) (may be nil).
func produce(t testing.TB, addr, dest, tag string, n int, hdr func(i int) map[string]string) {
	t.Helper()
	c := rawDial(t, addr)
	defer c.Disconnect()
	for start := 0; start < n; start += 500 {
		tx, err := c.BeginWithError()
		if err != nil {
			t.Fatal(err)
		}
		for i := start; i < n && i < start+500; i++ {
			opts := []func(*frame.Frame) error{
				stomp.SendOpt.Header("persistent", "true"),
				stomp.SendOpt.Header(testTag, tag),
				stomp.SendOpt.Header("n", strconv.Itoa(i)),
			}
			if hdr != nil {
				for k, v := range hdr(i) {
					opts = append(opts, stomp.SendOpt.Header(k, v))
				}
			}
			if err := tx.Send(dest, "text/plain", []byte(strconv.Itoa(i)), opts...); err != nil {
				t.Fatal(err)
			}
		}
		if err := tx.CommitWithReceipt(); err != nil {
			t.Fatal(err)
		}
	}
}

// drainWait bounds a whole drain: a destination that keeps delivering
// for this long fails the test instead of keeping it busy.
const drainWait = 2 * time.Minute

// drain consumes (and acknowledges) whatever is left on dest, waiting
// quiet for a message before deciding the destination is empty. It
// returns the drained messages' headers (the first value of each) and
// their body under "body". Each test drains only destinations of its own
// (its queues, its dead-letter destination, brokerDLQ of its queues), so
// no selector is needed and what it finds is the test's own.
func drain(t testing.TB, addr, dest string, quiet time.Duration) []map[string]string {
	t.Helper()
	return drainAtLeast(t, addr, dest, 0, quiet)
}

// drainAtLeast is drain that waits up to drainWait for the first want
// messages before it starts waiting quiet for more: a message the test
// expects, such as one of many megabytes on a loaded broker, may take
// longer than quiet to arrive.
func drainAtLeast(t testing.TB, addr, dest string, want int, quiet time.Duration) []map[string]string {
	t.Helper()
	c := rawDial(t, addr)
	defer c.Disconnect()
	sub, err := c.Subscribe(dest, stomp.AckClientIndividual, stomp.SubscribeOpt.Header("activemq.prefetchSize", "100"))
	if err != nil {
		t.Fatalf("drain %s: subscribe: %v", dest, err)
	}
	var got []map[string]string
	deadline := time.NewTimer(drainWait)
	defer deadline.Stop()
	for {
		wait := quiet
		if len(got) < want {
			wait = drainWait
		}
		idle := time.NewTimer(wait)
		select {
		case m, ok := <-sub.C:
			idle.Stop()
			if !ok {
				t.Fatalf("drain %s: subscription closed after %d messages", dest, len(got))
			}
			if m.Err != nil {
				t.Fatalf("drain %s: %v", dest, m.Err)
			}
			h := make(map[string]string)
			for i := 0; i < m.Header.Len(); i++ {
				k, v := m.Header.GetAt(i)
				if _, dup := h[k]; !dup {
					h[k] = v
				}
			}
			h["body"] = string(m.Body)
			got = append(got, h)
			if err := c.Ack(m); err != nil {
				t.Fatalf("drain %s: ack: %v", dest, err)
			}
		case <-idle.C:
			// No UNSUBSCRIBE: go-stomp v3.1.3 can miss its receipt and
			// stall for its 30s timeout. The deferred DISCONNECT ends the
			// subscription.
			return got
		case <-deadline.C:
			idle.Stop()
			t.Fatalf("drain %s: still delivering after %v (%d messages)", dest, drainWait, len(got))
		}
	}
}

// noDeadLetters returns a dead-letter destination of the test's own for a
// consumer that must dead-letter nothing, and checks that it is empty when
// the test ends (cleanups run last-registered first, so after the
// consumers started later have stopped).
func noDeadLetters(t *testing.T, addr string) string {
	t.Helper()
	dlq := "/queue/" + uniq("msgaudit.dlq")
	t.Cleanup(func() {
		if dl := drain(t, addr, dlq, 300*time.Millisecond); len(dl) != 0 {
			t.Errorf("the consumer dead-lettered %d messages into %s, first: %v", len(dl), dlq, short(dl[0]))
		}
	})
	return dlq
}

// short returns drained headers with the body cut to 64 bytes, for
// failure messages.
func short(h map[string]string) map[string]string {
	c := make(map[string]string, len(h))
	for k, v := range h {
		c[k] = v
	}
	if b := c["body"]; len(b) > 64 {
		c["body"] = fmt.Sprintf("%s… (%d bytes)", b[:64], len(b))
	}
	return c
}

// brokerDLQ is where the test broker dead-letters what it gives up on
// from queue q (a NACKed persistent message, an expired one): its
// per-queue dead-letter strategy puts it in /queue/DLQ.<name of q>. Only
// queues have one; what the broker dead-letters from a topic goes to the
// shared ActiveMQ.DLQ, which no test reads.
func brokerDLQ(q string) string {
	return "/queue/DLQ." + strings.TrimPrefix(q, "/queue/")
}

// checkBrokerDLQ fails if the broker dead-lettered any message from queue
// q (the consumer never hands a message to the broker's dead-lettering),
// and removes those it finds.
func checkBrokerDLQ(t testing.TB, addr, q string) {
	t.Helper()
	if !strings.HasPrefix(q, "/queue/") {
		t.Fatalf("checkBrokerDLQ(%q): the broker keeps a dead-letter queue per queue only", q)
	}
	if got := drain(t, addr, brokerDLQ(q), 300*time.Millisecond); len(got) > 0 {
		t.Errorf("the broker dead-lettered %d messages from %s into %s, first: %v", len(got), q, brokerDLQ(q), short(got[0]))
	}
}

// stompHeader is a SEND header option.
func stompHeader(k, v string) func(*frame.Frame) error { return stomp.SendOpt.Header(k, v) }
