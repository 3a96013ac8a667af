package tcpproxy_test

import (
	"bufio"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"io"
	"math/big"
	"net"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/acemq/msgaudit/internal/testkit/tcpproxy"
	"github.com/acemq/msgaudit/internal/testkit/testwait"
)

// echoServer is an upstream that echoes each line back. It counts the
// connections it accepted and those whose handler returned (the proxy
// closed the upstream side), and tracks all its goroutines with a
// WaitGroup.
type echoServer struct {
	ln       net.Listener
	mu       sync.Mutex
	accepted int
	ended    int
	wg       sync.WaitGroup
}

func newEchoServer(t *testing.T) *echoServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &echoServer{ln: ln}
	s.wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s.mu.Lock()
			s.accepted++
			s.mu.Unlock()
			s.wg.Go(func() {
				_, _ = io.Copy(c, c)
				c.Close()
				s.mu.Lock()
				s.ended++
				s.mu.Unlock()
			})
		}
	})
	t.Cleanup(func() {
		ln.Close()
		testwait.Group(t, &s.wg, testwait.Long, "the end of the echo server's accept loop and handlers after its listener closed")
	})
	return s
}

func (s *echoServer) Addr() string { return s.ln.Addr().String() }

func (s *echoServer) Accepted() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.accepted
}

// waitUpstreamClosed waits until every connection the upstream accepted
// has been closed by the proxy, failing the test if that takes absurdly
// long (a hang guard, not a timing assertion).
func (s *echoServer) waitUpstreamClosed(t *testing.T) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(time.Millisecond) {
		s.mu.Lock()
		acc, end := s.accepted, s.ended
		s.mu.Unlock()
		if acc == end {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("upstream: %d of %d connections still open", acc-end, acc)
		}
	}
}

func newProxy(t *testing.T, upstream string, opts tcpproxy.Options) *tcpproxy.Proxy {
	t.Helper()
	p, err := tcpproxy.New(upstream, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return p
}

// selfSigned returns a server config for 127.0.0.1 and a client config
// that trusts it.
func selfSigned(t *testing.T) (srv, cli *tls.Config) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "tcpproxy test"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	return &tls.Config{Certificates: []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: key}}},
		&tls.Config{RootCAs: pool, ServerName: "127.0.0.1"}
}

// dial connects to the proxy, over TLS if cli is not nil.
func dial(t *testing.T, addr string, cli *tls.Config) net.Conn {
	t.Helper()
	var c net.Conn
	var err error
	d := &net.Dialer{Timeout: testwait.Long} // also bounds the TLS handshake
	if cli != nil {
		c, err = tls.DialWithDialer(d, "tcp", addr, cli)
	} else {
		c, err = d.Dial("tcp", addr)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// roundTrip sends a line and expects it echoed within testwait.Long.
func roundTrip(t *testing.T, c net.Conn, line string) {
	t.Helper()
	_ = c.SetDeadline(time.Now().Add(testwait.Long))
	defer func() { _ = c.SetDeadline(time.Time{}) }()
	if _, err := io.WriteString(c, line+"\n"); err != nil {
		t.Fatalf("write: %v", err)
	}
	got, err := bufio.NewReader(c).ReadString('\n')
	if errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("timed out after %v: the echo of %q did not arrive", testwait.Long, line)
	}
	if err != nil {
		t.Fatalf("read: %v", err)
	}
	if got != line+"\n" {
		t.Fatalf("echo = %q, want %q", got, line+"\n")
	}
}

// forEachMode runs f as a parallel subtest through a plain and through a
// TLS proxy, with the server and client TLS configs of each (nil: plain).
func forEachMode(t *testing.T, f func(t *testing.T, srv, cli *tls.Config)) {
	t.Helper()
	srv, cli := selfSigned(t)
	for _, mode := range []struct {
		name     string
		srv, cli *tls.Config
	}{{"plain", nil, nil}, {"tls", srv, cli}} {
		t.Run("mode="+mode.name, func(t *testing.T) {
			t.Parallel()
			f(t, mode.srv, mode.cli)
		})
	}
}

// expectClosed reads from c and wants EOF or a reset, not data, within
// testwait.Long.
func expectClosed(t *testing.T, c net.Conn) {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(testwait.Long))
	n, err := c.Read(make([]byte, 1))
	if errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("timed out after %v: the proxy did not close the connection", testwait.Long)
	}
	if err == nil {
		t.Fatalf("read %d bytes from a connection the proxy should have closed", n)
	}
}

func TestForward(t *testing.T) {
	t.Parallel()
	forEachMode(t, func(t *testing.T, srv, cli *tls.Config) {
		up := newEchoServer(t)
		p := newProxy(t, up.Addr(), tcpproxy.Options{TLS: srv})
		a, b := dial(t, p.Addr(), cli), dial(t, p.Addr(), cli)
		roundTrip(t, a, "hello")
		roundTrip(t, b, "world")
		roundTrip(t, a, "again")
		if got := p.Live(); got != 2 {
			t.Errorf("Live = %d, want 2", got)
		}
		if got := up.Accepted(); got != 2 {
			t.Errorf("upstream accepted %d connections, want 2", got)
		}
	})
}

func TestCutClosesBothSides(t *testing.T) {
	t.Parallel()
	forEachMode(t, func(t *testing.T, srv, cli *tls.Config) {
		up := newEchoServer(t)
		p := newProxy(t, up.Addr(), tcpproxy.Options{TLS: srv})
		const n = 3
		conns := make([]net.Conn, n)
		for i := range conns {
			conns[i] = dial(t, p.Addr(), cli)
			roundTrip(t, conns[i], "before")
		}
		if got := p.Cut(); got != n {
			t.Errorf("Cut = %d, want %d", got, n)
		}
		if got := p.Live(); got != 0 {
			t.Errorf("Live after Cut = %d, want 0", got)
		}
		for _, c := range conns {
			expectClosed(t, c)
		}
		// Every upstream handler saw its connection close.
		up.waitUpstreamClosed(t)
		if got := p.Cut(); got != 0 {
			t.Errorf("second Cut = %d, want 0", got)
		}
		// The proxy still forwards new connections.
		roundTrip(t, dial(t, p.Addr(), cli), "after")
		if got := p.Live(); got != 1 {
			t.Errorf("Live = %d, want 1", got)
		}
	})
}

func TestSetDown(t *testing.T) {
	t.Parallel()
	up := newEchoServer(t)
	p := newProxy(t, up.Addr(), tcpproxy.Options{})
	live := dial(t, p.Addr(), nil)
	roundTrip(t, live, "up")

	p.SetDown(true)
	refused := dial(t, p.Addr(), nil)
	expectClosed(t, refused)
	if got := up.Accepted(); got != 1 {
		t.Errorf("upstream accepted %d connections while down, want 1 (the one before)", got)
	}
	// A live connection survives SetDown until Cut.
	roundTrip(t, live, "still up")
	if got := p.Live(); got != 1 {
		t.Errorf("Live = %d, want 1", got)
	}
	if got := p.Cut(); got != 1 {
		t.Errorf("Cut = %d, want 1", got)
	}

	p.SetDown(false)
	roundTrip(t, dial(t, p.Addr(), nil), "back")
	if got := up.Accepted(); got != 2 {
		t.Errorf("upstream accepted %d connections, want 2", got)
	}
}

func TestUpstreamUnreachable(t *testing.T) {
	t.Parallel()
	// A port nothing listens on: listen, note it, close.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	p := newProxy(t, addr, tcpproxy.Options{DialTimeout: time.Second})
	expectClosed(t, dial(t, p.Addr(), nil))
	if got := p.Live(); got != 0 {
		t.Errorf("Live = %d, want 0", got)
	}
}

func TestCloseStopsEverything(t *testing.T) {
	t.Parallel()
	up := newEchoServer(t)
	p, err := tcpproxy.New(up.Addr(), tcpproxy.Options{})
	if err != nil {
		t.Fatal(err)
	}
	conns := make([]net.Conn, 4)
	for i := range conns {
		conns[i] = dial(t, p.Addr(), nil)
		roundTrip(t, conns[i], "x")
	}
	addr := p.Addr()
	p.Close() // returns only once the proxy's own goroutines have
	p.Close() // idempotent
	for _, c := range conns {
		expectClosed(t, c)
	}
	up.waitUpstreamClosed(t)
	if got := p.Live(); got != 0 {
		t.Errorf("Live after Close = %d, want 0", got)
	}
	if c, err := net.Dial("tcp", addr); err == nil {
		// The port may be reused by someone else; if it accepts, it must
		// not be us forwarding.
		c.Close()
		if got := up.Accepted(); got != len(conns) {
			t.Errorf("upstream accepted %d after Close, want %d", got, len(conns))
		}
	}
}

// TestConcurrent hammers the proxy from several goroutines while cutting,
// for the race detector.
func TestConcurrent(t *testing.T) {
	t.Parallel()
	up := newEchoServer(t)
	p := newProxy(t, up.Addr(), tcpproxy.Options{})
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for range 20 {
				c, err := net.DialTimeout("tcp", p.Addr(), testwait.Long)
				if err != nil {
					t.Error(err)
					return
				}
				_ = c.SetDeadline(time.Now().Add(testwait.Long))
				_, _ = io.WriteString(c, "ping\n")
				if _, err := bufio.NewReader(c).ReadString('\n'); errors.Is(err, os.ErrDeadlineExceeded) { // other errors: cut
					t.Errorf("timed out after %v: neither an echo nor a cut came", testwait.Long)
				}
				c.Close()
			}
		})
	}
	wg.Go(func() {
		for i := range 40 {
			p.Cut()
			p.SetDown(i%2 == 0)
			_ = p.Live()
		}
		p.SetDown(false)
	})
	testwait.Group(t, &wg, testwait.Long, "the end of the 4 dialling goroutines and the cutter")
}

func TestBadUpstreamAddress(t *testing.T) {
	t.Parallel()
	// The upstream is dialled per connection, so a malformed one surfaces
	// as a client that is disconnected at once.
	p := newProxy(t, "no-port", tcpproxy.Options{})
	expectClosed(t, dial(t, p.Addr(), nil))
	if got := p.Live(); got != 0 {
		t.Errorf("Live = %d, want 0", got)
	}
}
