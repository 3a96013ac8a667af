package stompconsumer

import (
	"context"
	"errors"
	"github.com/acemq/msgaudit/receiver"
	"net"
	"sync"
	"testing"
	"time"
)

// fakeTLSPeer accepts TCP connections on loopback and, per mode, closes
// each at once (a drop mid-handshake) or holds it silent (a handshake that
// never completes). It needs no broker.
func fakeTLSPeer(t *testing.T, hold bool) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var held []net.Conn
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			if !hold {
				c.Close()
				continue
			}
			mu.Lock()
			held = append(held, c)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		recv(t, done, 10*time.Second, "the fake peer's accept loop to end")
		mu.Lock()
		for _, c := range held {
			c.Close()
		}
		mu.Unlock()
	})
	return ln.Addr().String()
}

// TestTLSDropIsRetried: a connection dropped during the TLS handshake is a
// network failure, retried like a refused dial — not ErrTLS, which means a
// certificate that retrying cannot fix.
func TestTLSDropIsRetried(t *testing.T) {
	t.Parallel()
	addr := fakeTLSPeer(t, false)
	c, err := New(Config{
		Addresses:        []string{"ssl://" + addr},
		ConnectRetries:   2,
		ReconnectBackoff: receiver.Backoff{Initial: time.Millisecond, Max: 5 * time.Millisecond},
		Subscriptions:    []Subscription{{Destination: "/queue/x", Handler: nopHandler}},
		Pipeline:         receiver.Config{MemoryOnly: true}})
	if err != nil {
		t.Fatal(err)
	}
	err = runUntilReturn(t, c)
	if !errors.Is(err, ErrConnect) || errors.Is(err, ErrTLS) {
		t.Fatalf("Run = %v, want ErrConnect and not ErrTLS", err)
	}
	if st := c.Stats(); st.ConnectErrors != 3 {
		t.Errorf("stats %+v, want 3 connect errors (retried)", st)
	}
}

// TestStopDuringTLSHandshake: cancelling Run while a TLS handshake hangs
// is a graceful stop: Run returns nil, not a certificate error.
func TestStopDuringTLSHandshake(t *testing.T) {
	t.Parallel()
	addr := fakeTLSPeer(t, true)
	c, err := New(Config{
		Addresses:      []string{"ssl://" + addr},
		ConnectRetries: -1,
		Subscriptions:  []Subscription{{Destination: "/queue/x", Handler: nopHandler}},
		Pipeline:       receiver.Config{MemoryOnly: true}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	if err := runFor(ctx, t, c); err != nil {
		t.Fatalf("Run = %v, want nil after cancel during the handshake", err)
	}
}
