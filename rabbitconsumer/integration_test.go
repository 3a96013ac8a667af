package rabbitconsumer

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"github.com/acemq/msgaudit/idempotency"
	"github.com/acemq/msgaudit/internal/copyhdr"
	"log/slog"
	"math/big"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/acemq/msgaudit/receiver"
	amqp "github.com/rabbitmq/amqp091-go"
)

// runConsumer starts c.Run and returns a stop function that cancels it and
// returns Run's error.
func runConsumer(t *testing.T, c *Consumer) (stop func() error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- c.Run(ctx) }()
	var once sync.Once
	var err error
	stop = func() error {
		once.Do(func() {
			cancel()
			select {
			case err = <-errc:
			case <-time.After(30 * time.Second):
				err = errors.New("Run did not return")
			}
		})
		return err
	}
	t.Cleanup(func() { stop() })
	return stop
}

// waitFor polls cond until it holds; after 30s it fails the test, saying
// what did not happen.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	if !eventually(30*time.Second, cond) {
		t.Fatalf("timed out after 30s waiting for %s", what)
	}
}

// eventually polls cond until it holds (true) or d passes (false), for
// goroutines that must not call t.Fatal and waits whose failure the test
// explains itself.
func eventually(d time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(10 * time.Millisecond)
	}
	return true
}

// recv receives one value from ch; after d it fails the test, saying what
// did not happen.
func recv[T any](t *testing.T, ch <-chan T, d time.Duration, what string) T {
	t.Helper()
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case v := <-ch:
		return v
	case <-timer.C:
		t.Fatalf("timed out after %v waiting for %s", d, what)
		panic("unreachable")
	}
}

// waitGroup waits for wg; after d it fails the test, saying what did not
// finish.
func waitGroup(t *testing.T, wg *sync.WaitGroup, d time.Duration, what string) {
	t.Helper()
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	recv(t, done, d, what)
}

// blockUntil is a handler's wait for the test to release it: true when
// release is closed, false (after failing the test) when ctx ends or d
// passes first, so a test that fails early leaves no handler blocked.
func blockUntil(ctx context.Context, t *testing.T, release <-chan struct{}, d time.Duration, what string) bool {
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-release:
		return true
	case <-ctx.Done():
		t.Errorf("a handler's context ended while it waited for %s", what)
	case <-timer.C:
		t.Errorf("a handler waited %v for %s", d, what)
	}
	return false
}

// runReturns runs c.Run, which must return on its own (an error at
// start), and returns its error; a Run still going after a minute fails
// the test.
func runReturns(t *testing.T, c *Consumer) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	err := recv(t, done, time.Minute+30*time.Second, "Run to return")
	if ctx.Err() != nil {
		t.Fatalf("Run did not return on its own within a minute: %v", err)
	}
	return err
}

// countingHandler counts calls per key and fails keys listed in fail.
type countingHandler struct {
	mu    sync.Mutex
	calls map[string]int
	fail  map[string]bool
}

func newCounting(fail ...string) *countingHandler {
	h := &countingHandler{calls: map[string]int{}, fail: map[string]bool{}}
	for _, k := range fail {
		h.fail[k] = true
	}
	return h
}

func (h *countingHandler) handle(_ context.Context, m *receiver.Message) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.calls[m.Key]++
	if h.fail[m.Key] {
		return errors.New("always fails")
	}
	return nil
}

func (h *countingHandler) n(key string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.calls[key]
}

// TestDeadLetterPaths: a message without an id, an oversized body and a
// message that always fails each reach the dead-letter queue with their
// reason — never a silent drop — while a good message is processed.
func TestDeadLetterPaths(t *testing.T) {
	t.Parallel()
	b := newBroker(t)
	q := b.queue("msgaudit-dl-")
	h := newCounting("fail")
	c, err := New(Config{
		URL:          b.url,
		Queue:        q,
		Handler:      h.handle,
		MaxBodyBytes: 1024,
		Pipeline: receiver.Config{MemoryOnly: true, MaxAttempts: 2,
			Backoff: receiver.Backoff{Initial: time.Millisecond, Max: time.Millisecond}}})
	if err != nil {
		t.Fatal(err)
	}
	stop := runConsumer(t, c)
	b.publish(q, amqp.Publishing{Body: []byte("no id"), Headers: amqp.Table{"trace": "t1"}})
	b.publish(q, amqp.Publishing{MessageId: "big", Body: bytes.Repeat([]byte("x"), 2048)})
	b.publish(q, amqp.Publishing{MessageId: "fail", Body: []byte("boom")})
	b.publish(q, amqp.Publishing{MessageId: "ok", Body: []byte("fine")})
	dlq := q + defaultDeadLetterSuffix
	waitFor(t, "3 dead letters", func() bool { return c.Stats().DeadLetters == 3 })
	waitFor(t, "ok processed", func() bool { return h.n("ok") == 1 })
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	reasons := map[string]amqp.Delivery{}
	for {
		d, ok := b.get(dlq)
		if !ok {
			break
		}
		reasons[d.MessageId] = d
	}
	want := map[string]string{"": "missing-key", "big": "body-too-large: 2048 bytes, limit 1024", "fail": "max-attempts: 2 attempts"}
	for id, prefix := range want {
		d, ok := reasons[id]
		if !ok {
			t.Errorf("message %q not dead-lettered (got %d)", id, len(reasons))
			continue
		}
		r, _ := d.Headers[copyhdr.DeadLetterReason].(string)
		if !strings.HasPrefix(r, prefix) {
			t.Errorf("message %q: reason %q; want prefix %q", id, r, prefix)
		}
		if oq, _ := d.Headers[HeaderOriginalQueue].(string); oq != q {
			t.Errorf("message %q: original queue %q", id, oq)
		}
	}
	if d := reasons[""]; d.Headers["trace"] != "t1" || string(d.Body) != "no id" {
		t.Errorf("dead letter lost the original headers or body: %v %q", d.Headers, d.Body)
	}
	if d := reasons["fail"]; d.Headers[copyhdr.Attempts] != int64(2) {
		t.Errorf("attempts header %v; want 2", d.Headers[copyhdr.Attempts])
	}
	if len(reasons["big"].Body) != 2048 {
		t.Error("oversized body not kept in the dead letter")
	}
	if h.n("big") != 0 || h.n("fail") != 2 || h.n("") != 0 {
		t.Errorf("handler calls %v; want big 0, fail 2, missing-id 0", h.calls)
	}
	if n := b.ready(q); n != 0 {
		t.Errorf("queue holds %d", n)
	}
	if st := c.Stats(); st.Oversized != 1 {
		t.Errorf("stats %+v", st)
	}
}

// TestKeyHeader: without a message id the key comes from KeyHeader; a
// second message with the same key is a duplicate.
func TestKeyHeader(t *testing.T) {
	t.Parallel()
	b := newBroker(t)
	q := b.queue("msgaudit-kh-")
	h := newCounting()
	var dups sync.Map
	c, err := New(Config{
		URL:       b.url,
		Queue:     q,
		Handler:   h.handle,
		KeyHeader: "x-idempotency-key",
		Pipeline: receiver.Config{MemoryOnly: true, Duplicates: receiver.DuplicateHook, OnDuplicate: func(_ context.Context, m *receiver.Message, reason string) {
			dups.Store(m.Key, reason)
		}}})
	if err != nil {
		t.Fatal(err)
	}
	runConsumer(t, c)
	for range 2 {
		b.publish(q, amqp.Publishing{Headers: amqp.Table{"x-idempotency-key": "order-42"}, Body: []byte("x")})
	}
	waitFor(t, "both deliveries settled", func() bool { return c.Stats().Acks == 2 })
	if n := h.n("order-42"); n != 1 {
		t.Fatalf("handler ran %d times for order-42; want 1", n)
	}
	if r, ok := dups.Load("order-42"); !ok || r != "audit" {
		t.Errorf("duplicate hook: %v %v; want reason audit (the memory tier)", r, ok)
	}
	if s := c.Metrics().Snapshot(); s.Duplicates() != 1 || s.Processed != 1 {
		t.Errorf("metrics %+v", s)
	}
}

// TestRejectedLogin: a wrong password ends Run at once with ErrRejected
// (no retry storm), and the password appears in no error or log line.
func TestRejectedLogin(t *testing.T) {
	t.Parallel()
	b := newBroker(t)
	const secret = "wr0ng-s3cret-pw"
	pu, err := url.Parse(b.url)
	if err != nil {
		t.Fatal(err)
	}
	pu.User = url.UserPassword("guest", secret) // right user, wrong password
	u := pu.String()
	var logs bytes.Buffer
	c, err := New(Config{
		URL:     u,
		Queue:   "unused",
		Handler: newCounting().handle,
		// ConnectRetries unset: a failed start is retried until ctx is done
		Pipeline: receiver.Config{MemoryOnly: true,
			Logger: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))}})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	err = runReturns(t, c)
	if !errors.Is(err, ErrRejected) {
		t.Fatalf("Run = %v; want ErrRejected", err)
	}
	if c.Stats().ConnectErrors != 0 {
		t.Errorf("retried a refused login: %+v", c.Stats())
	}
	t.Logf("refused after %v: %v", time.Since(start).Round(time.Millisecond), err)
	for what, s := range map[string]string{"error": err.Error(), "logs": logs.String(), "config": fmt.Sprintf("%v %+v %#v %s", c.cfg, c.cfg, &c.cfg, c.cfg)} {
		if strings.Contains(s, secret) {
			t.Errorf("%s reveals the password: %s", what, s)
		}
	}
}

// TestConnectRetries: an address nobody listens on gives ErrConnect once
// the first attempt and ConnectRetries retries have failed.
func TestConnectRetries(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	c, err := New(Config{
		URL:              "amqp://u:p4ss-word@" + addr + "/",
		Queue:            "q",
		Handler:          newCounting().handle,
		ConnectRetries:   3,
		ReconnectBackoff: receiver.Backoff{Initial: time.Millisecond, Max: 5 * time.Millisecond},
		Pipeline:         receiver.Config{MemoryOnly: true}})
	if err != nil {
		t.Fatal(err)
	}
	err = runReturns(t, c)
	if !errors.Is(err, ErrConnect) || strings.Contains(err.Error(), "p4ss-word") {
		t.Fatalf("Run = %v; want ErrConnect without the password", err)
	}
	if n := c.Stats().ConnectErrors; n != 4 {
		t.Errorf("%d connect errors; want 4 (the first attempt and 3 retries)", n)
	}
}

// TestGracefulStop: cancelling Run lets the running handler finish and
// acknowledges it; deliveries not started go back to the queue.
func TestGracefulStop(t *testing.T) {
	t.Parallel()
	b := newBroker(t)
	q := b.queue("msgaudit-gs-")
	started := make(chan string, 10)
	release := make(chan struct{})
	var done sync.Map
	h := func(ctx context.Context, m *receiver.Message) error {
		started <- m.Key
		blockUntil(ctx, t, release, time.Minute, "the test to release the running handler")
		done.Store(m.Key, true)
		return nil
	}
	for i := range 5 {
		b.publish(q, amqp.Publishing{MessageId: fmt.Sprint("m", i)})
	}
	c, err := New(Config{URL: b.url, Queue: q, Handler: h, Prefetch: 5, Pipeline: receiver.Config{MemoryOnly: true}})
	if err != nil {
		t.Fatal(err)
	}
	stop := runConsumer(t, c)
	first := recv(t, started, 30*time.Second, "the first handler to start")
	waitFor(t, "prefetch", func() bool { return b.ready(q) == 0 })
	stopped := make(chan error, 1)
	go func() { stopped <- stop() }()
	time.Sleep(50 * time.Millisecond) // let the stop begin while the handler runs
	close(release)
	if err := recv(t, stopped, time.Minute, "the graceful stop to return"); err != nil {
		t.Fatal(err)
	}
	if _, ok := done.Load(first); !ok {
		t.Fatal("running handler did not finish")
	}
	n := 0
	done.Range(func(any, any) bool { n++; return true })
	if got := b.ready(q); got != 5-n {
		t.Fatalf("queue holds %d after stop; want %d (the %d not processed)", got, 5-n, 5-n)
	}
	if st := c.Stats(); st.Acks != uint64(n) {
		t.Errorf("acks %d; want %d", st.Acks, n)
	}
}

// tlsFixture writes a CA and a server certificate for 127.0.0.1 into dir
// and returns the CA file and the server's TLS config.
func tlsFixture(t *testing.T, dir string) (caFile string, server *tls.Config) {
	t.Helper()
	caKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "msgaudit test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(caDER)
	srvKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	srvTmpl := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "127.0.0.1"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, DNSNames: []string{"localhost"},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, KeyUsage: x509.KeyUsageDigitalSignature}
	srvDER, err := x509.CreateCertificate(rand.Reader, srvTmpl, ca, &srvKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	caFile = filepath.Join(dir, "ca.pem")
	if err := os.WriteFile(caFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}), 0o600); err != nil {
		t.Fatal(err)
	}
	return caFile, &tls.Config{MinVersion: tls.VersionTLS12,
		Certificates: []tls.Certificate{{Certificate: [][]byte{srvDER}, PrivateKey: srvKey}}}
}

// TestTLS consumes through amqps:// (a TLS-terminating proxy in front of
// the broker) with a custom CA; without it, or with a wrong server name,
// Run fails at once with ErrTLS.
func TestTLS(t *testing.T) {
	t.Parallel()
	b := newBroker(t)
	caFile, srv := tlsFixture(t, t.TempDir())
	px := newProxy(t, b.hostPort(), srv)
	amqps := b.via("amqps", px.Addr())

	q := b.queue("msgaudit-tls-")
	h := newCounting()
	c, err := New(Config{URL: amqps, CAFile: caFile, Queue: q, Handler: h.handle, Pipeline: receiver.Config{MemoryOnly: true}})
	if err != nil {
		t.Fatal(err)
	}
	stop := runConsumer(t, c)
	b.publish(q, amqp.Publishing{MessageId: "over-tls"})
	waitFor(t, "the message over TLS", func() bool { return c.Stats().Acks == 1 })
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if h.n("over-tls") != 1 {
		t.Fatal("handler did not run")
	}

	for name, cfg := range map[string]Config{
		"system-roots":      {},
		"wrong-server-name": {CAFile: caFile, ServerName: "broker.example"},
	} {
		cfg.URL, cfg.Queue, cfg.Handler, cfg.Pipeline.MemoryOnly = amqps, q, h.handle, true
		c, err := New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		err = runReturns(t, c)
		if !errors.Is(err, ErrTLS) {
			t.Errorf("%s: Run = %v; want ErrTLS", name, err)
		}
		if c.Stats().ConnectErrors != 0 {
			t.Errorf("%s: retried a TLS verification failure", name)
		}
	}
}

// TestRedisStore: with a Redis store opened from its URL (Fency's default
// store) a restarted consumer — new process state, same Redis — recognises
// a message it already processed.
func TestRedisStore(t *testing.T) {
	t.Parallel()
	b := newBroker(t)
	q := b.queue("msgaudit-su-")
	redisURL := serviceURL(t, "MSGAUDIT_REDIS_URL")
	prefix := randomName(t, "msgaudit:test:") + ":"
	t.Cleanup(func() { deletePrefix(t, redisClient(t), prefix) })
	sep := "?"
	if strings.Contains(redisURL, "?") {
		sep = "&"
	}
	h := newCounting()
	for run := range 2 {
		st, err := idempotency.Open(context.Background(), redisURL+sep+"msgaudit_prefix="+url.QueryEscape(prefix), idempotency.Options{})
		if err != nil {
			t.Fatal(err)
		}
		defer st.Close()
		c, err := New(Config{URL: b.url, Queue: q, Handler: h.handle, Pipeline: receiver.Config{Store: st}})
		if err != nil {
			t.Fatal(err)
		}
		stop := runConsumer(t, c)
		b.publish(q, amqp.Publishing{MessageId: "once"})
		waitFor(t, "the delivery settled", func() bool { return c.Stats().Acks == 1 })
		if err := stop(); err != nil {
			t.Fatal(err)
		}
		s := c.Metrics().Snapshot()
		if run == 1 && (s.DuplicatesStore != 1 || s.Processed != 0) {
			t.Fatalf("after restart: %+v; want the store to absorb the duplicate", s)
		}
	}
	if n := h.n("once"); n != 1 {
		t.Fatalf("handler ran %d times; want 1", n)
	}
}
