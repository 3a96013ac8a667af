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

	"github.com/acemq/msgaudit/internal/testenv"
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

// testTag marks every message a test produces (a JMS-selector-friendly
// property name) so its dead letters can be found in the shared
// ActiveMQ.DLQ without touching other tests' messages.
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

// drain consumes (and acknowledges) whatever is left on dest, optionally
// only messages matching selector, waiting quiet for a message before
// deciding the destination is empty. It returns the drained messages'
// headers.
func drain(t testing.TB, addr, dest, selector string, quiet time.Duration) []map[string]string {
	t.Helper()
	c := rawDial(t, addr)
	defer c.Disconnect()
	opts := []func(*frame.Frame) error{stomp.SubscribeOpt.Header("activemq.prefetchSize", "100")}
	if selector != "" {
		opts = append(opts, stomp.SubscribeOpt.Header("selector", selector))
	}
	sub, err := c.Subscribe(dest, stomp.AckClientIndividual, opts...)
	if err != nil {
		t.Fatal(err)
	}
	var got []map[string]string
	for {
		select {
		case m, ok := <-sub.C:
			if !ok || m.Err != nil {
				t.Fatalf("drain %s: %v", dest, m)
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
				t.Fatal(err)
			}
		case <-time.After(quiet):
			_ = sub.Unsubscribe()
			return got
		}
	}
}

// checkBrokerDLQ fails if ActiveMQ.DLQ holds any message of this test (by
// tag), and removes those it finds.
func checkBrokerDLQ(t testing.TB, addr, tag string) {
	t.Helper()
	if got := drain(t, addr, "/queue/ActiveMQ.DLQ", fmt.Sprintf("%s = '%s'", testTag, tag), 300*time.Millisecond); len(got) > 0 {
		t.Errorf("ActiveMQ.DLQ holds %d messages of this test, first: %v", len(got), got[0])
	}
}

// stompHeader is a SEND header option.
func stompHeader(k, v string) func(*frame.Frame) error { return stomp.SendOpt.Header(k, v) }
