package stompconsumer

import (
	"context"
	"github.com/acemq/msgaudit/internal/testkit/logbuf"
	"github.com/acemq/msgaudit/receiver"
	"strings"
	"testing"
	"time"
)

// TestStartDuringTakeover: the consumer starts while no broker answers
// (the pair between masters, a restart) and the broker comes back 10s
// later, well past the few seconds a bounded start would have allowed. By
// default the consumer keeps trying, logs each attempt (address, attempt,
// error, next wait, never the passcode) and consumes once the broker is
// back.
func TestStartDuringTakeover(t *testing.T) {
	addr := stompAddr(t)
	q := "/queue/" + uniq("msgaudit.takeover")
	tag := uniq("tag")
	const n = 20
	produce(t, addr, q, tag, n, nil)
	px := newProxy(t, addr)
	px.SetDown(true)
	const pass = "takeover-Secret-31"
	l := newLedger()
	var logs logbuf.Buffer
	c, err := New(Config{
		Addresses:             []string{px.Addr()},
		Login:                 "msgaudit",
		Passcode:              pass,
		DeadLetterDestination: noDeadLetters(t, addr),
		Subscriptions:         []Subscription{{Destination: q, Handler: l.handler(0, 0)}},
		Pipeline:              receiver.Config{Logger: debugLogger(&logs), MemoryOnly: true}})
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
	ok := eventually(60*time.Second, func() bool { return l.count() == n })
	cancel()
	err, _ = recv(t, done, 60*time.Second, "Run to return")
	if err != nil {
		t.Fatalf("Run = %v", err)
	}
	if !ok {
		t.Fatalf("timed out after 60s with the broker up: %d of %d messages applied, stats %+v", l.count(), n, c.Stats())
	}
	l.verify(t, n)
	s := c.Stats()
	if s.Connects != 1 || s.ConnectErrors < 2 {
		t.Errorf("stats %+v: want several failed attempts, then one connection", s)
	}
	out := logs.String()
	if strings.Contains(out, pass) {
		t.Errorf("the passcode is in the logs:\n%s", out)
	}
	var attempts int
	for _, line := range strings.Split(out, "\n") {
		if !strings.Contains(line, "connect failed") {
			continue
		}
		attempts++
		for _, want := range []string{"address=tcp://" + px.Addr(), "attempt=", "err=", "next_wait="} {
			if !strings.Contains(line, want) {
				t.Errorf("attempt log line lacks %q: %s", want, line)
			}
		}
	}
	if attempts != int(s.ConnectErrors) {
		t.Errorf("%d attempt log lines for %d failed attempts:\n%s", attempts, s.ConnectErrors, out)
	}
}
