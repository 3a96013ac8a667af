package tcpproxy_test

import (
	"bytes"
	"crypto/tls"
	"io"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/acemq/msgaudit/internal/testkit/tcpproxy"
	"github.com/acemq/msgaudit/internal/testkit/testwait"
	"pgregory.net/rapid"
)

// lines splits a stream into lines that keep their '\n'; the bytes after
// the last '\n' are a frame of their own at the end of the stream.
func lines(data []byte, atEOF bool) (int, []byte, error) {
	if i := bytes.IndexByte(data, '\n'); i >= 0 {
		return i + 1, data[:i+1], nil
	}
	if atEOF && len(data) > 0 {
		return len(data), data, nil
	}
	return 0, nil, nil
}

// recorder is an upstream that keeps what each connection sent it and
// hands it over on ended once that connection ends.
type recorder struct {
	ln    net.Listener
	ended chan string
	wg    sync.WaitGroup
}

func newRecorder(t *testing.T) *recorder {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r := &recorder{ln: ln, ended: make(chan string, 100)}
	r.wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			r.wg.Go(func() {
				defer c.Close()
				_ = c.SetReadDeadline(time.Now().Add(testwait.Long))
				b, _ := io.ReadAll(c) // an error (a reset) ends the connection like EOF
				r.ended <- string(b)
			})
		}
	})
	t.Cleanup(func() {
		ln.Close()
		testwait.Group(t, &r.wg, testwait.Long, "the end of the recorder's accept loop and handlers")
	})
	return r
}

// received waits for the next connection to end and returns what it sent.
func (r *recorder) received(t testwait.TB) string {
	t.Helper()
	got, _ := testwait.Recv(t, r.ended, testwait.Long, "the end of the upstream connection")
	return got
}

// verdicts returns a Filter that decides by the frame's text, and counts
// its calls.
func verdicts(m map[string]tcpproxy.Verdict, calls *atomic.Int64) func([]byte) tcpproxy.Verdict {
	return func(f []byte) tcpproxy.Verdict {
		calls.Add(1)
		return m[string(f)] // Forward when absent
	}
}

// TestFilter: what the upstream receives when the filter forwards, drops
// or cuts at a frame; a cut also closes the client's side.
func TestFilter(t *testing.T) {
	t.Parallel()
	drop := map[string]tcpproxy.Verdict{"COMMIT 1\n": tcpproxy.Drop}
	cut := map[string]tcpproxy.Verdict{"COMMIT 1\n": tcpproxy.Cut}
	for _, tt := range []struct {
		name     string
		verdicts map[string]tcpproxy.Verdict
		send     string
		want     string
		cut      bool
	}{
		{"forward", nil, "BEGIN\nCOMMIT 1\nEND\n", "BEGIN\nCOMMIT 1\nEND\n", false},
		{"drop", drop, "BEGIN\nCOMMIT 1\nEND\n", "BEGIN\nEND\n", false},
		{"drop-every-one", drop, "COMMIT 1\nA\nCOMMIT 1\n", "A\n", false},
		{"cut", cut, "BEGIN\nCOMMIT 1\nEND\n", "BEGIN\n", true},
		{"cut-first", cut, "COMMIT 1\nEND\n", "", true},
		{"partial-tail", nil, "A\nno newline", "A\nno newline", false},
		{"not-a-prefix", cut, "COMMIT 10\nCOMMIT 1 \n", "COMMIT 10\nCOMMIT 1 \n", false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			forEachMode(t, func(t *testing.T, srv, cli *tls.Config) {
				up := newRecorder(t)
				var calls atomic.Int64
				p := newProxy(t, up.ln.Addr().String(), tcpproxy.Options{TLS: srv, Split: lines, Filter: verdicts(tt.verdicts, &calls)})
				c := dial(t, p.Addr(), cli)
				_ = c.SetDeadline(time.Now().Add(testwait.Long))
				_, _ = io.WriteString(c, tt.send) // a cut may reset the rest
				if tt.cut {
					expectClosed(t, c)
				} else {
					c.Close()
				}
				if got := up.received(t); got != tt.want {
					t.Errorf("upstream received %q, want %q", got, tt.want)
				}
				if !tt.cut && calls.Load() != int64(strings.Count(tt.send, "\n")+btoi(!strings.HasSuffix(tt.send, "\n"))) {
					t.Errorf("filter called %d times for %q", calls.Load(), tt.send)
				}
			})
		})
	}
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// TestFilterProperty: however a client's writes are chunked, the upstream
// receives exactly the frames the filter forwards, in order, up to the
// first one it cuts at, and the filter sees each frame whole.
func TestFilterProperty(t *testing.T) {
	t.Parallel()
	up := newRecorder(t)
	rapid.Check(t, func(rt *rapid.T) {
		n := rapid.IntRange(0, 12).Draw(rt, "frames")
		var frames []string
		var vs []tcpproxy.Verdict
		for i := range n {
			f := rapid.StringMatching(`[a-z ]{0,20}`).Draw(rt, "frame") + "\n"
			if i == n-1 && rapid.Bool().Draw(rt, "tail") {
				f = f[:len(f)-1] + "tail" // the stream ends mid-line
			}
			frames = append(frames, f)
			vs = append(vs, tcpproxy.Verdict(rapid.IntRange(0, 2).Draw(rt, "verdict")))
		}
		var want, stream strings.Builder
		cut := false
		for i, f := range frames {
			stream.WriteString(f)
			if cut {
				continue
			}
			switch vs[i] {
			case tcpproxy.Forward:
				want.WriteString(f)
			case tcpproxy.Cut:
				cut = true
			}
		}
		// Every draw comes before the connection: what rapid draws must not
		// depend on when a cut makes a write fail, and an iteration rapid
		// abandons mid-draw must leave no connection behind to be
		// recorded as the next one's.
		var chunks []string
		for s := stream.String(); len(s) > 0; {
			k := rapid.IntRange(1, len(s)).Draw(rt, "chunk")
			chunks, s = append(chunks, s[:k]), s[k:]
		}
		var seen []string
		var mu sync.Mutex
		p, err := tcpproxy.New(up.ln.Addr().String(), tcpproxy.Options{Split: lines, Filter: func(f []byte) tcpproxy.Verdict {
			mu.Lock()
			defer mu.Unlock()
			seen = append(seen, string(f))
			return vs[len(seen)-1]
		}})
		if err != nil {
			rt.Fatal(err)
		}
		defer p.Close()
		c, err := net.DialTimeout("tcp", p.Addr(), testwait.Long)
		if err != nil {
			rt.Fatal(err)
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(testwait.Long))
		for _, ch := range chunks {
			if _, err := io.WriteString(c, ch); err != nil {
				break // cut
			}
		}
		_ = c.(*net.TCPConn).CloseWrite()
		if got := up.received(rt); got != want.String() {
			rt.Fatalf("upstream received %q, want %q", got, want.String())
		}
		mu.Lock()
		defer mu.Unlock()
		for i, f := range seen {
			if f != frames[i] {
				rt.Fatalf("filter saw frame %d as %q, want %q", i, f, frames[i])
			}
		}
	})
}

// TestFilterOptions: Split and Filter go together.
func TestFilterOptions(t *testing.T) {
	t.Parallel()
	for _, opts := range []tcpproxy.Options{
		{Split: lines},
		{Filter: func([]byte) tcpproxy.Verdict { return tcpproxy.Forward }},
	} {
		if p, err := tcpproxy.New("127.0.0.1:1", opts); err == nil {
			p.Close()
			t.Errorf("New(%+v) = nil error, want one", opts)
		} else if !strings.Contains(err.Error(), "Split and Options.Filter") {
			t.Errorf("New: %v, want it to name Split and Filter", err)
		}
	}
}
