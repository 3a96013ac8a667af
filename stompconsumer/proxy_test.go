package stompconsumer

import (
	"errors"
	"io"
	"net"
	"sync"
	"testing"
)

// proxy is a TCP forwarder between the consumer and the broker. Cut closes
// every live connection (both sides), which the broker sees as a dropped
// client: it redelivers everything unacknowledged, prefetched messages
// included. Down refuses new connections until Up.
type proxy struct {
	t        testing.TB
	ln       net.Listener
	upstream string

	mu    sync.Mutex
	conns map[net.Conn]struct{}
	down  bool
	cuts  int
	wg    sync.WaitGroup
}

// newProxy listens on 127.0.0.1:0 and forwards to upstream. It is closed
// with the test.
func newProxy(t testing.TB, upstream string) *proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &proxy{t: t, ln: ln, upstream: upstream, conns: make(map[net.Conn]struct{})}
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(p.Close)
	return p
}

// Addr is the address clients dial.
func (p *proxy) Addr() string { return p.ln.Addr().String() }

func (p *proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		down := p.down
		p.mu.Unlock()
		if down {
			c.Close()
			continue
		}
		u, err := net.Dial("tcp", p.upstream)
		if err != nil {
			c.Close()
			continue
		}
		p.mu.Lock()
		p.conns[c] = struct{}{}
		p.conns[u] = struct{}{}
		p.mu.Unlock()
		p.wg.Add(2)
		go p.pipe(c, u)
		go p.pipe(u, c)
	}
}

func (p *proxy) pipe(dst, src net.Conn) {
	defer p.wg.Done()
	_, err := io.Copy(dst, src)
	if err != nil && !errors.Is(err, net.ErrClosed) {
		p.t.Logf("proxy: %v", err)
	}
	dst.Close()
	src.Close()
	p.mu.Lock()
	delete(p.conns, dst)
	delete(p.conns, src)
	p.mu.Unlock()
}

// Cut closes every live connection through the proxy and returns how many
// client connections it cut.
func (p *proxy) Cut() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := len(p.conns) / 2
	for c := range p.conns {
		c.Close()
	}
	p.cuts++
	return n
}

// Live returns the number of client connections currently forwarded.
func (p *proxy) Live() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.conns) / 2
}

// SetDown makes the proxy refuse (accept and close) new connections.
func (p *proxy) SetDown(down bool) {
	p.mu.Lock()
	p.down = down
	p.mu.Unlock()
}

// Close stops the proxy and cuts every connection.
func (p *proxy) Close() {
	p.ln.Close()
	p.Cut()
	p.wg.Wait()
}
