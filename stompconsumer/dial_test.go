package stompconsumer

import (
	"bufio"
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"github.com/acemq/msgaudit/internal/testkit/logbuf"
	"log/slog"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/acemq/msgaudit/receiver"
)

func debugLogger(w *logbuf.Buffer) *slog.Logger {
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

func nopHandler(context.Context, *receiver.Message) error { return nil }

// runUntilReturn runs c.Run with a generous timeout and returns its error;
// Run must return on its own, before the timeout.
func runUntilReturn(t *testing.T, c *Consumer) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	err := runFor(ctx, t, c)
	if ctx.Err() != nil {
		t.Fatalf("Run did not return on its own within 60s: %v", err)
	}
	return err
}

// runFor runs c.Run(ctx) for a ctx that ends by itself (a timeout) and
// returns its error; a Run still running 30s after ctx ended fails the
// test instead of hanging it.
func runFor(ctx context.Context, t *testing.T, c *Consumer) error {
	t.Helper()
	if _, ok := ctx.Deadline(); !ok {
		t.Fatal("runFor needs a context with a deadline")
	}
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
	}
	err, _ := recv(t, done, 30*time.Second, "Run to return after its context ended")
	return err
}

// rejectingServer answers every CONNECT with ActiveMQ's authentication
// ERROR frame; it counts the CONNECTs and records whether the passcode
// arrived on the wire.
type rejectingServer struct {
	ln       net.Listener
	connects atomic.Int64
	sawPass  atomic.Bool
}

func newRejectingServer(t *testing.T, passcode string) *rejectingServer {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &rejectingServer{ln: ln}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				r := bufio.NewReader(c)
				f, err := r.ReadBytes(0)
				if err != nil {
					return
				}
				s.connects.Add(1)
				if bytes.Contains(f, []byte("passcode:"+passcode)) {
					s.sawPass.Store(true)
				}
				_, _ = c.Write([]byte("ERROR\ncontent-type:text/plain\nmessage:User name [admin] or password is invalid.\n\n\x00"))
				time.Sleep(50 * time.Millisecond)
			}()
		}
	}()
	return s
}

// TestRejectedFailsFast: a CONNECT answered with ERROR ends Run at once
// with the broker's message, after exactly one attempt (no retry storm),
// although by default Run retries a failed start until ctx is done, and
// neither the error nor any log line holds the passcode.
func TestRejectedFailsFast(t *testing.T) {
	t.Parallel()
	const pass = "Very-Secret-Pass-42"
	srv := newRejectingServer(t, pass)
	var logs logbuf.Buffer
	c, err := New(Config{
		Addresses: []string{srv.ln.Addr().String(), srv.ln.Addr().String()},
		Login:     "admin",
		Passcode:  pass,
		// ConnectRetries unset: by default Run retries until ctx is done
		Subscriptions: []Subscription{{Destination: "/queue/x", Handler: nopHandler}},
		Pipeline:      receiver.Config{Logger: debugLogger(&logs), MemoryOnly: true},
	})
	if err != nil {
		t.Fatal(err)
	}
	err = runUntilReturn(t, c)
	if !errors.Is(err, ErrRejected) {
		t.Fatalf("Run = %v, want ErrRejected", err)
	}
	if !strings.Contains(err.Error(), "User name [admin] or password is invalid.") {
		t.Errorf("error lacks the broker's message: %v", err)
	}
	if n := srv.connects.Load(); n != 1 {
		t.Errorf("broker saw %d CONNECTs, want exactly 1 (no retry storm)", n)
	}
	if !srv.sawPass.Load() {
		t.Error("the passcode was not sent on CONNECT")
	}
	if strings.Contains(err.Error(), pass) || strings.Contains(logs.String(), pass) {
		t.Errorf("passcode leaked: err=%v\nlogs:\n%s", err, logs.String())
	}
	if !strings.Contains(logs.String(), "password is invalid") {
		t.Errorf("logs lack the rejection:\n%s", logs.String())
	}
}

// TestBrokerDownAtStart: nothing listens; Run gives up after
// ConnectRetries+1 attempts with a clear error.
func TestBrokerDownAtStart(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	const pass = "another-Secret-99"
	var logs logbuf.Buffer
	c, err := New(Config{
		Addresses:        []string{"tcp://u:" + pass + "@" + addr},
		ConnectRetries:   2,
		ReconnectBackoff: receiver.Backoff{Initial: time.Millisecond, Max: 5 * time.Millisecond},
		Subscriptions:    []Subscription{{Destination: "/queue/x", Handler: nopHandler}},
		Pipeline:         receiver.Config{Logger: debugLogger(&logs), MemoryOnly: true},
	})
	if err != nil {
		t.Fatal(err)
	}
	err = runUntilReturn(t, c)
	if !errors.Is(err, ErrConnect) {
		t.Fatalf("Run = %v, want ErrConnect", err)
	}
	for _, want := range []string{"3 attempts", addr, "connection refused"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q lacks %q", err, want)
		}
	}
	if st := c.Stats(); st.ConnectErrors != 3 || st.Connects != 0 {
		t.Errorf("stats %+v, want 3 connect errors", st)
	}
	if strings.Contains(err.Error(), pass) || strings.Contains(logs.String(), pass) {
		t.Errorf("URL password leaked: %v\n%s", err, logs.String())
	}
}

// TestStopWhileConnecting: cancelling ctx during the start retries ends Run
// with nil.
func TestStopWhileConnecting(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	c, err := New(Config{
		Addresses:        []string{addr},
		ConnectRetries:   -1,
		ReconnectBackoff: receiver.Backoff{Initial: 10 * time.Millisecond, Max: 10 * time.Millisecond},
		Subscriptions:    []Subscription{{Destination: "/queue/x", Handler: nopHandler}},
		Pipeline:         receiver.Config{MemoryOnly: true}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	if err := runFor(ctx, t, c); err != nil {
		t.Fatalf("Run = %v, want nil after cancel", err)
	}
	if c.Stats().ConnectErrors < 2 {
		t.Errorf("expected retries until cancel, stats %+v", c.Stats())
	}
}

// writeOtherCA writes a self-signed CA the broker's certificate does not
// chain to.
func writeOtherCA(t *testing.T) string {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(7), Subject: pkix.Name{CommonName: "not the broker's CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IsCA: true,
		BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), "other-ca.pem")
	if err := os.WriteFile(p, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func tlsEnv(t *testing.T) (addr, ca string) {
	addr = envOrSkip(t, "MSGAUDIT_STOMP_TLS_ADDR", "ActiveMQ STOMP over TLS")
	ca = envOrSkip(t, "MSGAUDIT_STOMP_CA", "ActiveMQ STOMP over TLS")
	return addr, ca
}

// TestTLSConsume consumes over STOMP+TLS, trusting the broker's CA file.
func TestTLSConsume(t *testing.T) {
	addr := stompAddr(t)
	tlsAddr, ca := tlsEnv(t)
	q := "/queue/" + uniq("msgaudit.tls")
	tag := uniq("tag")
	const n = 50
	produce(t, addr, q, tag, n, nil)
	l := newLedger()
	for _, variant := range []struct {
		name string
		cfg  Config
	}{
		{"ssl-url", Config{Addresses: []string{"ssl://" + tlsAddr}, CAFile: ca, Pipeline: receiver.Config{MemoryOnly: true}}},
		{"stomp+ssl-url", Config{Addresses: []string{"stomp+ssl://" + tlsAddr}, CAFile: ca, Pipeline: receiver.Config{MemoryOnly: true}}},
		{"bare-with-ca", Config{Addresses: []string{tlsAddr}, CAFile: ca, ServerName: "localhost", Pipeline: receiver.Config{MemoryOnly: true}}},
	} {
		t.Run(variant.name, func(t *testing.T) {
			cfg := variant.cfg
			cfg.DeadLetterDestination = noDeadLetters(t, addr)
			cfg.Subscriptions = []Subscription{{Destination: q, Handler: l.handler(0, 0)}}
			cfg.Pipeline.MemoryOnly = true
			c, err := New(cfg)
			if err != nil {
				t.Fatal(err)
			}
			stop := runConsumer(t, c)
			target := l.count() + n/4
			waitFor(t, 30*time.Second, "messages over TLS", func() bool { return l.count() >= min(target, n) && c.Stats().Connects == 1 })
			if err := stop(); err != nil {
				t.Fatal(err)
			}
			if c.Stats().Connects != 1 {
				t.Errorf("stats %+v", c.Stats())
			}
		})
	}
	// Whatever the variants left is consumed by a last one.
	c, err := New(Config{
		Addresses:             []string{"ssl://" + tlsAddr},
		CAFile:                ca,
		DeadLetterDestination: noDeadLetters(t, addr),
		Subscriptions:         []Subscription{{Destination: q, Handler: l.handler(0, 0)}},
		Pipeline:              receiver.Config{MemoryOnly: true}})
	if err != nil {
		t.Fatal(err)
	}
	stop := runConsumer(t, c)
	waitFor(t, 30*time.Second, "all messages over TLS", func() bool { return l.count() == n })
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	l.verify(t, n)
	checkBrokerDLQ(t, addr, q)
}

// TestTLSWrongCA: a CA that did not sign the broker's certificate fails at
// once with a clear x509 error, not retried (by default a failed start is
// retried until ctx is done).
func TestTLSWrongCA(t *testing.T) {
	tlsAddr, _ := tlsEnv(t)
	c, err := New(Config{
		Addresses:     []string{"ssl://" + tlsAddr},
		CAFile:        writeOtherCA(t),
		Subscriptions: []Subscription{{Destination: "/queue/x", Handler: nopHandler}},
		Pipeline:      receiver.Config{MemoryOnly: true}})
	if err != nil {
		t.Fatal(err)
	}
	err = runUntilReturn(t, c)
	if !errors.Is(err, ErrTLS) {
		t.Fatalf("Run = %v, want ErrTLS", err)
	}
	var uae x509.UnknownAuthorityError
	if !errors.As(err, &uae) || !strings.Contains(err.Error(), "x509: certificate signed by unknown authority") {
		t.Errorf("error is not a clear x509 unknown-authority error: %v", err)
	}
	if n := c.Stats().ConnectErrors; n != 1 {
		t.Errorf("%d attempts, want 1: certificate errors are not retried", n)
	}
}

// TestTLSSystemRootsRejectSelfSigned: ssl:// without a CA uses the system
// roots, which do not trust the test broker's self-signed certificate.
func TestTLSSystemRootsRejectSelfSigned(t *testing.T) {
	tlsAddr, _ := tlsEnv(t)
	c, err := New(Config{
		Addresses:     []string{"ssl://" + tlsAddr},
		Subscriptions: []Subscription{{Destination: "/queue/x", Handler: nopHandler}},
		Pipeline:      receiver.Config{MemoryOnly: true}})
	if err != nil {
		t.Fatal(err)
	}
	if err := runUntilReturn(t, c); !errors.Is(err, ErrTLS) {
		t.Fatalf("Run = %v, want ErrTLS", err)
	}
}

// TestLogin runs against the test broker that requires logins
// (MSGAUDIT_STOMP_AUTH_ADDR, with the login MSGAUDIT_STOMP_AUTH as
// user:password; scripts/services starts it and exports both).
func TestLogin(t *testing.T) {
	addr := envOrSkip(t, "MSGAUDIT_STOMP_AUTH_ADDR", "ActiveMQ requiring logins")
	auth := envOrSkip(t, "MSGAUDIT_STOMP_AUTH", "the login of the ActiveMQ requiring logins")
	user, pass, ok := strings.Cut(auth, ":")
	if !ok {
		t.Fatalf("MSGAUDIT_STOMP_AUTH=%q is not user:password", "…")
	}
	t.Run("wrong", func(t *testing.T) {
		var logs logbuf.Buffer
		wrong := pass + "-wrong"
		c, err := New(Config{
			Addresses:     []string{addr},
			Login:         user,
			Passcode:      wrong,
			Subscriptions: []Subscription{{Destination: "/queue/x", Handler: nopHandler}},
			Pipeline:      receiver.Config{Logger: debugLogger(&logs), MemoryOnly: true}})
		if err != nil {
			t.Fatal(err)
		}
		err = runUntilReturn(t, c)
		if !errors.Is(err, ErrRejected) || !strings.Contains(err.Error(), "password is invalid") {
			t.Fatalf("Run = %v, want ErrRejected with the broker's message", err)
		}
		// The broker answers a wrong login with an ERROR frame and closes
		// the connection; under load the close can reach the client
		// before the frame, and that attempt is an ordinary connection
		// loss, retried. The rejection itself is never retried.
		if n := c.Stats().ConnectErrors; n < 1 || n > 3 {
			t.Errorf("%d attempts, want 1 (or a few, when the broker's close overtook its ERROR frame)\n%s", n, logs.String())
		}
		if strings.Contains(err.Error(), wrong) || strings.Contains(logs.String(), wrong) {
			t.Errorf("passcode leaked: %v\n%s", err, logs.String())
		}
	})
	t.Run("right", func(t *testing.T) {
		q := "/queue/" + uniq("msgaudit.login")
		tag := uniq("tag")
		const n = 20
		produce(t, addr, q, tag, n, nil) // rawDial logs in with MSGAUDIT_STOMP_AUTH
		l := newLedger()
		for _, cfg := range []Config{
			{Addresses: []string{addr}, Login: user, Passcode: pass},
			{Addresses: []string{"tcp://" + user + ":" + pass + "@" + addr}},
		} {
			cfg.Subscriptions, cfg.Pipeline.MemoryOnly = []Subscription{{Destination: q, Handler: l.handler(0, 0)}}, true
			c, err := New(cfg)
			if err != nil {
				t.Fatal(err)
			}
			stop := runConsumer(t, c)
			waitFor(t, 10*time.Second, "connected", func() bool { return c.Stats().Connects == 1 })
			if err := stop(); err != nil {
				t.Fatal(err)
			}
		}
		c, err := New(Config{
			Addresses:     []string{addr},
			Login:         user,
			Passcode:      pass,
			Subscriptions: []Subscription{{Destination: q, Handler: l.handler(0, 0)}},
			Pipeline:      receiver.Config{MemoryOnly: true}})
		if err != nil {
			t.Fatal(err)
		}
		stop := runConsumer(t, c)
		waitFor(t, 30*time.Second, "all messages", func() bool { return l.count() == n })
		if err := stop(); err != nil {
			t.Fatal(err)
		}
		l.verify(t, n)
	})
}

// fakeBroker listens on a loopback port until the test ends. On each
// connection it reads the CONNECT, answers with connected (raw bytes) and
// hands the connection to after, closing it when after returns. It
// returns its address and the number of connections taken.
func fakeBroker(t *testing.T, connected string, after func(c net.Conn, r *bufio.Reader)) (string, *atomic.Int64) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	conns := new(atomic.Int64)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			conns.Add(1)
			go func() {
				defer c.Close()
				r := bufio.NewReader(c)
				if _, err := r.ReadBytes(0); err != nil {
					return
				}
				_, _ = c.Write([]byte(connected))
				after(c, r)
			}()
		}
	}()
	return ln.Addr().String(), conns
}

// TestRefusedSubscribeBacksOff: a broker that accepts the CONNECT but
// answers SUBSCRIBE with an ERROR (as for a destination the user may not
// read) must not be hammered with reconnects: sessions that break at once
// back off exponentially.
func TestRefusedSubscribeBacksOff(t *testing.T) {
	t.Parallel()
	addr, conns := fakeBroker(t, "CONNECTED\nversion:1.2\nheart-beat:0,0\n\n\x00", func(c net.Conn, r *bufio.Reader) {
		if _, err := r.ReadBytes(0); err != nil {
			return
		}
		_, _ = c.Write([]byte("ERROR\nmessage:User admin is not authorized to read from: queue://x\n\n\x00"))
	})
	var logs logbuf.Buffer
	c, err := New(Config{
		Addresses:        []string{addr},
		Heartbeat:        -1,
		ReconnectBackoff: receiver.Backoff{Initial: 100 * time.Millisecond, Max: time.Second},
		Subscriptions:    []Subscription{{Destination: "/queue/x", Handler: nopHandler}},
		Pipeline:         receiver.Config{Logger: debugLogger(&logs), MemoryOnly: true}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 1500*time.Millisecond)
	defer cancel()
	if err := runFor(ctx, t, c); err != nil {
		t.Fatalf("Run = %v", err)
	}
	// Without backoff this loop reconnects hundreds of times a second.
	if n := conns.Load(); n < 2 || n > 10 {
		t.Errorf("%d connections in 1.5 s; want a few (backing off from 100 ms)", n)
	}
	if !strings.Contains(logs.String(), "not authorized to read") {
		t.Errorf("the broker's ERROR message is not logged:\n%s", logs.String())
	}
}

// TestHeartbeatBeforeConnected: a broker that sends a heart-beat before
// CONNECTED (ActiveMQ did, on a loaded machine) is connected to at the
// first attempt.
func TestHeartbeatBeforeConnected(t *testing.T) {
	t.Parallel()
	var subscribed atomic.Int64
	addr, _ := fakeBroker(t, "\n\r\nCONNECTED\nversion:1.2\nheart-beat:0,0\n\n\x00", func(c net.Conn, r *bufio.Reader) {
		f, err := r.ReadBytes(0)
		if err != nil {
			return
		}
		if bytes.HasPrefix(bytes.TrimLeft(f, "\r\n"), []byte("SUBSCRIBE\n")) {
			subscribed.Add(1)
		}
		_, _ = r.ReadBytes(0) // until the consumer disconnects
	})
	var logs logbuf.Buffer
	c, err := New(Config{
		Addresses:     []string{addr},
		Subscriptions: []Subscription{{Destination: "/queue/x", Handler: nopHandler}},
		Pipeline:      receiver.Config{Logger: debugLogger(&logs), MemoryOnly: true}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if err := runFor(ctx, t, c); err != nil {
		t.Fatalf("Run = %v", err)
	}
	if s := c.Stats(); s.Connects != 1 || s.ConnectErrors != 0 || subscribed.Load() != 1 {
		t.Errorf("stats %+v, %d SUBSCRIBE frames; want one connection, no failed attempt and one SUBSCRIBE\n%s", s, subscribed.Load(), logs.String())
	}
}
