package natsconsumer

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/acemq/msgaudit/internal/testkit/testwait"
	"github.com/acemq/msgaudit/receiver"
	"github.com/nats-io/nats.go/jetstream"
)

// consumerExists reports whether the test's durable consumer exists.
func (e *natsEnv) consumerExists() bool {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := e.js.Consumer(ctx, e.stream, e.consumer)
	return err == nil
}

// TestDeadLetterWaitsForItsStream: while the dead-letter stream is gone a
// poison message's record cannot be stored; the message is handed back
// each time, neither terminated nor lost. Once the stream is created
// again the record is stored there and only then is the message
// terminated.
func TestDeadLetterWaitsForItsStream(t *testing.T) {
	e := newEnv(t, 0)
	var calls counter
	cfg := e.config(e.url, func(ctx context.Context, m *receiver.Message) error {
		calls.add(string(m.Body))
		return errInjected
	})
	cfg.Pipeline.MemoryOnly = true
	cfg.Pipeline.MaxAttempts = 2
	cfg.Pipeline.Backoff = receiver.Backoff{Initial: 10 * time.Millisecond, Max: 20 * time.Millisecond}
	c := newConsumer(t, cfg)
	stop := start(t, c)
	testwait.Until(t, 30*time.Second, "the durable consumer created", e.consumerExists)
	e.deleteStream(e.dlStream)
	ack := e.publish("poison", "")
	testwait.Until(t, 30*time.Second, "three dead-letter publishes failed, or the message settled", func() bool {
		return c.Stats().DeadLetterErrors >= 3 || (c.Stats().DeadLetterErrors >= 1 && e.drained())
	})
	if s := c.Stats(); s.DeadLetters != 0 {
		t.Fatalf("stats %+v: a record counted as stored while the dead-letter stream is gone", s)
	}
	if e.drained() {
		t.Fatalf("the poison message was settled (ack floor at stream sequence %d) while its record could not be stored", e.info().AckFloor.Stream)
	}
	ctx := testwait.Context(t, testwait.Long)
	if _, err := e.js.CreateStream(ctx, jetstream.StreamConfig{Name: e.dlStream, Subjects: []string{e.dlSubject},
		Storage: jetstream.FileStorage}); err != nil {
		t.Fatalf("create the dead-letter stream again: %v", err)
	}
	testwait.Until(t, 30*time.Second, "the record stored and the poison message terminated", func() bool {
		return c.Stats().DeadLetters == 1 && e.drained()
	})
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	dl := e.deadLetters()
	if len(dl) != 1 || dl[0].Header.Get(HeaderOriginalSequence) != strconv.FormatUint(ack.Sequence, 10) {
		t.Fatalf("dead letters %+v; want one record of sequence %d", dl, ack.Sequence)
	}
	if k := calls.get("poison"); k < 2 {
		t.Errorf("poison handled %d times; want at least MaxAttempts 2", k)
	}
}

// TestDeadLetterLoopRefused: a consumed stream that captures the
// dead-letter subject itself, with no filter keeping the records from the
// consumer, would bring each record back to be dead-lettered again: Run
// refuses it with ErrConfig, whether the stream names the subject or
// takes it by a wildcard. A filter that keeps the records out is
// accepted.
func TestDeadLetterLoopRefused(t *testing.T) {
	e := newEnv(t, 0)
	id := randomName(t)
	base := "msgaudit-loop-" + id
	stream := "msgaudit_test_loop_" + id
	ctx := testwait.Context(t, testwait.Long)
	st, err := e.js.CreateStream(ctx, jetstream.StreamConfig{Name: stream, Subjects: []string{base + ".>"}, Storage: jetstream.FileStorage})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.deleteStream(stream) })
	for _, tc := range []struct {
		subjects []string
		filters  []string
		refused  bool
	}{
		{[]string{base + ".>"}, nil, true},
		{[]string{base + ".*"}, nil, true},
		{[]string{base + ".orders", base + ".dlq"}, nil, true},
		{[]string{base + ".*"}, []string{base + ".orders"}, false},
		{[]string{base + ".>"}, []string{base + ".orders"}, false},
	} {
		cfg := st.CachedInfo().Config
		cfg.Subjects = tc.subjects
		if _, err := e.js.UpdateStream(ctx, cfg); err != nil {
			t.Fatalf("update stream to %q: %v", tc.subjects, err)
		}
		c := newConsumer(t, Config{URL: e.url, Stream: stream, Consumer: "loop", DeadLetterSubject: base + ".dlq",
			FilterSubjects: tc.filters, Handler: func(context.Context, *receiver.Message) error { return nil },
			Pipeline: receiver.Config{MemoryOnly: true}})
		rctx, cancel := context.WithCancel(context.Background())
		t.Cleanup(cancel)
		done := make(chan error, 1)
		go func() { done <- c.Run(rctx) }()
		if tc.refused {
			err, _ := testwait.Recv(t, done, 15*time.Second, "Run's refusal")
			if !errors.Is(err, ErrConfig) {
				t.Errorf("stream subjects %q, filters %q: Run returned %v; want ErrConfig", tc.subjects, tc.filters, err)
			}
			cancel()
			continue
		}
		select {
		case err := <-done:
			t.Errorf("stream subjects %q, filters %q: Run returned %v; want it running", tc.subjects, tc.filters, err)
		case <-time.After(2 * time.Second):
		}
		cancel()
		if err, _ := testwait.Recv(t, done, time.Minute, "Run's return"); err != nil {
			t.Errorf("Run: %v", err)
		}
	}
}

// TestDeadLetterOnlyToItsStream: when the dead-letter subject moves, while
// the consumer runs, from the dead-letter stream to the consumed stream
// (whose every subject the consumer reads), a record is not stored there
// (it would come back to be dead-lettered again) and does not count as
// stored: the message is handed back, not terminated.
func TestDeadLetterOnlyToItsStream(t *testing.T) {
	e := newEnv(t, 0)
	cfg := e.config(e.url, func(ctx context.Context, m *receiver.Message) error { return errInjected })
	cfg.Pipeline.MemoryOnly = true
	cfg.Pipeline.MaxAttempts = 2
	cfg.Pipeline.Backoff = receiver.Backoff{Initial: 10 * time.Millisecond, Max: 20 * time.Millisecond}
	c := newConsumer(t, cfg)
	stop := start(t, c)
	testwait.Until(t, 30*time.Second, "the durable consumer created", e.consumerExists)
	e.deleteStream(e.dlStream)
	ctx := testwait.Context(t, testwait.Long)
	st, err := e.js.Stream(ctx, e.stream)
	if err != nil {
		t.Fatal(err)
	}
	sc := st.CachedInfo().Config
	sc.Subjects = append(sc.Subjects, e.dlSubject)
	if _, err := e.js.UpdateStream(ctx, sc); err != nil {
		t.Fatalf("add the dead-letter subject to the consumed stream: %v", err)
	}
	e.publish("poison", "")
	testwait.Until(t, 30*time.Second, "three dead-letter publishes failed, or a record counted as stored", func() bool {
		s := c.Stats()
		return s.DeadLetterErrors >= 3 || s.DeadLetters > 0
	})
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if s := c.Stats(); s.DeadLetters != 0 {
		t.Errorf("stats %+v: a record the consumed stream took counted as stored", s)
	}
	info, err := st.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if n := info.State.Msgs; n != 1 {
		t.Errorf("the consumed stream holds %d messages; want the poison message only", n)
	}
	if e.drained() {
		t.Errorf("the poison message was terminated without a record in the dead-letter stream")
	}
}
