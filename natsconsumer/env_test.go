package natsconsumer

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/acemq/msgaudit/internal/testkit/tcpproxy"
	"github.com/acemq/msgaudit/internal/testkit/testenv"
	"github.com/acemq/msgaudit/internal/testkit/testwait"
	"github.com/acemq/msgaudit/receiver"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// natsEnv is one test's streams on the NATS server of MSGAUDIT_NATS_URL:
// a stream of its own (subjects "<prefix>.>") and a dead-letter stream
// (subject "<prefix>-dlq"), both with random names, deleted with the test.
type natsEnv struct {
	t                   testing.TB
	url                 string
	nc                  *nats.Conn
	js                  jetstream.JetStream
	stream, subject     string // the stream and the subject the test publishes to
	dlStream, dlSubject string
	consumer            string // a durable name for the test's consumers
	hostPort            string // the (first) server's host:port, for a proxy
}

func randomName(t testing.TB) string {
	b := make([]byte, 6)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}

// newEnv creates the test's streams; dup is the stream's duplicate
// window (0: the server's default).
func newEnv(t testing.TB, dup time.Duration) *natsEnv {
	t.Helper()
	return newEnvOn(t, testenv.Getenv(t, "MSGAUDIT_NATS_URL", "a NATS server with JetStream"), dup, 1)
}

// newEnvOn is newEnv on the server (or comma-separated cluster) at raw,
// with streams of the given number of replicas. The test's connection
// reconnects by itself, so that it outlives a server's restart.
func newEnvOn(t testing.TB, raw string, dup time.Duration, replicas int) *natsEnv {
	t.Helper()
	u, err := url.Parse(strings.Split(raw, ",")[0])
	if err != nil {
		t.Fatalf("NATS URL %s: %v", raw, err)
	}
	nc, err := nats.Connect(raw, nats.Timeout(10*time.Second), nats.MaxReconnects(-1), nats.ReconnectWait(100*time.Millisecond))
	if err != nil {
		t.Fatalf("connect %s: %v", raw, err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	id := randomName(t)
	e := &natsEnv{t: t, url: raw, nc: nc, js: js, hostPort: u.Host,
		stream: "msgaudit_test_" + id, subject: "msgaudit-test-" + id + ".orders",
		dlStream: "msgaudit_test_dlq_" + id, dlSubject: "msgaudit-test-" + id + "-dlq",
		consumer: "worker-" + id}
	ctx := testwait.Context(t, testwait.Long)
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: e.stream, Subjects: []string{"msgaudit-test-" + id + ".>"},
		Storage: jetstream.FileStorage, Duplicates: dup, Replicas: replicas}); err != nil {
		t.Fatalf("create stream: %v", err)
	}
	t.Cleanup(func() { e.deleteStream(e.stream) })
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: e.dlStream, Subjects: []string{e.dlSubject},
		Storage: jetstream.FileStorage, Replicas: replicas}); err != nil {
		t.Fatalf("create dead-letter stream: %v", err)
	}
	t.Cleanup(func() { e.deleteStream(e.dlStream) })
	return e
}

func (e *natsEnv) deleteStream(name string) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := e.js.DeleteStream(ctx, name); err != nil && !errors.Is(err, jetstream.ErrStreamNotFound) {
		e.t.Errorf("cleanup: delete stream %s: %v", name, err)
	}
}

// publish publishes body with the given Nats-Msg-Id ("" for none) and
// returns the PubAck.
func (e *natsEnv) publish(body, msgID string) *jetstream.PubAck {
	e.t.Helper()
	m := nats.NewMsg(e.subject)
	m.Data = []byte(body)
	if msgID != "" {
		m.Header.Set(jetstream.MsgIDHeader, msgID)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ack, err := e.js.PublishMsg(ctx, m)
	if err != nil {
		e.t.Fatalf("publish: %v", err)
	}
	return ack
}

// config is a Config for the test's stream and consumer.
func (e *natsEnv) config(url string, h receiver.Handler) Config {
	return Config{URL: url, Stream: e.stream, Consumer: e.consumer, DeadLetterSubject: e.dlSubject,
		Handler: h, ConnectTimeout: 10 * time.Second}
}

// info returns the durable consumer's state.
func (e *natsEnv) info() *jetstream.ConsumerInfo {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := e.js.Consumer(ctx, e.stream, e.consumer)
	if err != nil {
		e.t.Fatalf("consumer info: %v", err)
	}
	return c.CachedInfo()
}

// drained reports whether the consumer has nothing left to deliver and
// nothing unacknowledged.
func (e *natsEnv) drained() bool {
	i := e.info()
	return i.NumPending == 0 && i.NumAckPending == 0 && i.NumRedelivered == 0
}

// deadLetters returns the records in the dead-letter stream.
func (e *natsEnv) deadLetters() []*jetstream.RawStreamMsg {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := e.js.Stream(ctx, e.dlStream)
	if err != nil {
		e.t.Fatal(err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		e.t.Fatal(err)
	}
	var out []*jetstream.RawStreamMsg
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq && info.State.Msgs > 0; seq++ {
		m, err := s.GetMsg(ctx, seq)
		if err != nil {
			e.t.Fatalf("get dead letter %d: %v", seq, err)
		}
		out = append(out, m)
	}
	return out
}

// newProxy forwards TCP connections from 127.0.0.1:0 to the server; Cut
// closes every live connection. It is closed with the test.
func (e *natsEnv) newProxy() *tcpproxy.Proxy {
	e.t.Helper()
	p, err := tcpproxy.New(e.hostPort, tcpproxy.Options{})
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(p.Close)
	return p
}
