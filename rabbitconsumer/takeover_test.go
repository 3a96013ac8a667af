package rabbitconsumer

import (
	"context"
	"github.com/acemq/msgaudit/internal/testkit/logbuf"
	"github.com/acemq/msgaudit/receiver"
	"log/slog"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// TestStartDuringBrokerRestart: the consumer starts while the broker does
// not answer (a restart) and the broker comes back 10s later, well past
// the few seconds a bounded start would have allowed. By default the
// consumer keeps trying, logs each attempt (address, attempt, error, next
// wait, never the password) and consumes once the broker is back.
func TestStartDuringBrokerRestart(t *testing.T) {
	t.Parallel()
	b := newBroker(t)
	q := b.queue("msgaudit-restart-")
	const n = 20
	b.publishMany(q, n, func(i int) amqp.Publishing {
		return amqp.Publishing{MessageId: "m" + strconv.Itoa(i), Body: []byte(strconv.Itoa(i))}
	})
	px := newProxy(t, b.hostPort(), nil)
	px.SetDown(true)
	u := b.via("amqp", px.Addr())
	var logs logbuf.Buffer
	h := newCounting()
	c, err := New(Config{
		URL:      u,
		Queue:    q,
		Handler:  h.handle,
		Pipeline: receiver.Config{Logger: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug})), MemoryOnly: true}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	// The broker stays away for 10s; Run must not return meanwhile.
	down := time.NewTimer(10 * time.Second)
	select {
	case err := <-done:
		down.Stop()
		t.Fatalf("Run = %v while the broker was down, after %d attempts; want it to keep trying", err, c.Stats().ConnectErrors)
	case <-down.C:
	}
	px.SetDown(false)
	handled := func() bool {
		for i := range n {
			if h.n("m"+strconv.Itoa(i)) == 0 {
				return false
			}
		}
		return true
	}
	ok := eventually(60*time.Second, handled)
	cancel()
	if err := recv(t, done, time.Minute, "Run to return"); err != nil {
		t.Fatalf("Run = %v", err)
	}
	if !ok {
		t.Fatalf("timed out after 60s with the broker up: not every message handled, stats %+v", c.Stats())
	}
	for i := range n {
		if k := "m" + strconv.Itoa(i); h.n(k) != 1 {
			t.Errorf("message %s handled %d times, want 1", k, h.n(k))
		}
	}
	if left := b.ready(q); left != 0 {
		t.Errorf("%d messages left in the queue", left)
	}
	s := c.Stats()
	if s.Connects != 1 || s.ConnectErrors < 2 {
		t.Errorf("stats %+v: want several failed attempts, then one connection", s)
	}
	out := logs.String()
	pu, err := url.Parse(b.url)
	if err != nil {
		t.Fatal(err)
	}
	if pass, ok := pu.User.Password(); ok && strings.Contains(out, ":"+pass+"@") {
		t.Errorf("the password is in the logs:\n%s", out)
	}
	var attempts int
	for _, line := range strings.Split(out, "\n") {
		if !strings.Contains(line, "connect failed") {
			continue
		}
		attempts++
		for _, want := range []string{"address=" + px.Addr(), "attempt=", "err=", "next_wait="} {
			if !strings.Contains(line, want) {
				t.Errorf("attempt log line lacks %q: %s", want, line)
			}
		}
	}
	if attempts != int(s.ConnectErrors) {
		t.Errorf("%d attempt log lines for %d failed attempts:\n%s", attempts, s.ConnectErrors, out)
	}
}
