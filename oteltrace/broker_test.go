package oteltrace_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/acemq/msgaudit/idempotency"
	"github.com/acemq/msgaudit/internal/testkit/testenv"
	"github.com/acemq/msgaudit/internal/testkit/testwait"
	"github.com/acemq/msgaudit/natsconsumer"
	"github.com/acemq/msgaudit/oteltrace"
	"github.com/acemq/msgaudit/rabbitconsumer"
	"github.com/acemq/msgaudit/receiver"
	"github.com/acemq/msgaudit/stompconsumer"
	"github.com/go-stomp/stomp/v3"
	"github.com/go-stomp/stomp/v3/frame"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	amqp "github.com/rabbitmq/amqp091-go"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
)

func uniq(t testing.TB, prefix string) string {
	var b [6]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatal(err)
	}
	return prefix + hex.EncodeToString(b[:])
}

// scenario is what each broker test sends and checks: message "a" with
// its producer's traceparent, "b" whose handler fails once (two attempts
// in its producer's trace), "c" without a traceparent (a trace of its
// own), then "a" again from another producer (a duplicate, marked, in that
// producer's trace).
type scenario struct {
	t        *testing.T
	tracer   *oteltrace.Tracer
	rec      *tracetest.SpanRecorder
	tp       *sdktrace.TracerProvider
	store    idempotency.Store
	a, b, a2 producer

	mu     sync.Mutex
	runs   map[string]int                 // handler runs by body
	inside map[string][]trace.SpanContext // the span each run's context carried, by body
}

func newScenario(t *testing.T, system string) *scenario {
	tr, rec, tp := newTracer(t, system)
	store, err := idempotency.NewMemory(idempotency.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = store.Close() })
	return &scenario{t: t, tracer: tr, rec: rec, tp: tp, store: store,
		a: newProducer(t), b: newProducer(t), a2: newProducer(t),
		runs: map[string]int{}, inside: map[string][]trace.SpanContext{}}
}

// start runs run (a consumer's Run) until the returned stop, which the
// test's cleanup calls too: stop cancels it and waits for it to return.
func (s *scenario) start(run func(context.Context) error) (stop func()) {
	t := s.t
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- run(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			if err, _ := testwait.Recv(t, done, time.Minute, "Run returning after cancel"); err != nil {
				t.Errorf("Run: %v", err)
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

// pipeline is the receiver configuration every broker test's consumer
// runs: the scenario's store and tracer, and short backoffs.
func (s *scenario) pipeline() receiver.Config {
	return receiver.Config{Store: s.store, Observer: s.tracer,
		Backoff: receiver.Backoff{Initial: 10 * time.Millisecond, Max: 50 * time.Millisecond}}
}

// play sends a, b and c with send, starts the consumer's run, waits for
// a, b twice and c, sends the duplicate of a with again and waits for it;
// it returns start's stop.
func (s *scenario) play(run func(context.Context) error, send func(key string, p *producer), again func()) (stop func()) {
	s.t.Helper()
	send("a", &s.a)
	send("b", &s.b)
	send("c", nil)
	stop = s.start(run)
	s.waitDeliveries(4, "a, b twice and c processed")
	again()
	s.waitDeliveries(5, "the duplicate of a processed")
	return stop
}

// waitSettled waits until the consumer's counters show a, b, c and the
// duplicate acknowledged and b's first attempt handed back.
func (s *scenario) waitSettled(stats func() receiver.TransportStats) {
	s.t.Helper()
	testwait.Until(s.t, time.Minute, "4 acknowledgements (a, b, c, the duplicate) and 1 requeue (b)", func() bool {
		st := stats()
		return st.Acks == 4 && st.Requeues == 1
	})
}

// handler fails the first run of body "b"; each run starts a span of the
// application's own under the handler's context.
func (s *scenario) handler(ctx context.Context, m *receiver.Message) error {
	_, span := s.tp.Tracer("app").Start(ctx, "app.work")
	defer span.End()
	body := string(m.Body)
	s.mu.Lock()
	s.runs[body]++
	n := s.runs[body]
	s.inside[body] = append(s.inside[body], trace.SpanContextFromContext(ctx))
	s.mu.Unlock()
	if body == "b" && n == 1 {
		return errors.New("first attempt of b fails")
	}
	return nil
}

// deliveries returns the ended delivery spans.
func (s *scenario) deliveries() []sdktrace.ReadOnlySpan {
	d, _ := spans(s.rec)
	return d
}

// waitDeliveries waits until n delivery spans have ended.
func (s *scenario) waitDeliveries(n int, what string) {
	s.t.Helper()
	testwait.Until(s.t, 2*time.Minute, what, func() bool { return len(s.deliveries()) >= n })
}

// check verifies the recorded trace of the whole scenario; system and dest
// are the messaging.system and messaging.destination.name every delivery
// span must carry.
func (s *scenario) check(system, dest string) {
	t := s.t
	t.Helper()
	t.Logf("the recorded spans:\n%s", describe(s.rec))
	deliveries, others := spans(s.rec)
	if len(deliveries) != 5 {
		t.Fatalf("%d delivery spans; want 5 (a, b twice, c, a's duplicate)", len(deliveries))
	}
	all := append(append([]sdktrace.ReadOnlySpan{}, deliveries...), others...)
	byID := map[trace.SpanID]sdktrace.ReadOnlySpan{}
	for _, sp := range all {
		byID[sp.SpanContext().SpanID()] = sp
	}
	producers := map[trace.SpanID]producer{s.a.span: s.a, s.b.span: s.b, s.a2.span: s.a2}
	// Nothing leaks across deliveries: a delivery span's parent is its
	// producer's span or nothing, every other span's parent is a span of
	// its own trace.
	for _, sp := range all {
		par := sp.Parent()
		switch {
		case sp.SpanKind() == trace.SpanKindConsumer && !par.IsValid():
		case sp.SpanKind() == trace.SpanKindConsumer:
			p, ok := producers[par.SpanID()]
			if !ok || !par.IsRemote() || p.trace != sp.SpanContext().TraceID() {
				t.Errorf("delivery span %s has parent %s, not a producer's remote span of its trace", sp.SpanContext().SpanID(), par.SpanID())
			}
		default:
			pp, ok := byID[par.SpanID()]
			if !ok || pp.SpanContext().TraceID() != sp.SpanContext().TraceID() {
				t.Errorf("span %s %s: parent %s is not a recorded span of its trace", sp.Name(), sp.SpanContext().SpanID(), par.SpanID())
			}
		}
	}
	for _, sp := range deliveries {
		a := attrs(sp.Attributes())
		if a["messaging.system"].AsString() != system || a["messaging.destination.name"].AsString() != dest ||
			a["messaging.operation.type"].AsString() != "process" || sp.Name() != "process "+dest {
			t.Errorf("delivery span %s: %s system=%q destination=%q operation=%q", sp.SpanContext().SpanID(), sp.Name(),
				a["messaging.system"].AsString(), a["messaging.destination.name"].AsString(), a["messaging.operation.type"].AsString())
		}
	}
	inTrace := func(p producer) []sdktrace.ReadOnlySpan {
		var out []sdktrace.ReadOnlySpan
		for _, sp := range deliveries {
			if sp.SpanContext().TraceID() == p.trace {
				out = append(out, sp)
			}
		}
		return out
	}
	handlerOf := func(sp sdktrace.ReadOnlySpan) sdktrace.ReadOnlySpan {
		h := children(others, sp)[handlerSpan]
		if len(h) != 1 {
			return nil
		}
		return h[0]
	}
	// a: one delivery, processed, its handler span in the producer's
	// trace, the application's span under it.
	if got := inTrace(s.a); len(got) != 1 {
		t.Errorf("%d delivery spans in a's trace; want 1", len(got))
	} else {
		at := attrs(got[0].Attributes())
		if at["msgaudit.duplicate"].AsBool() || at["msgaudit.action"].AsString() != "ack" || at["messaging.message.id"].AsString() == "" {
			t.Errorf("a: duplicate=%v action=%q id=%q; want false, ack and an id", at["msgaudit.duplicate"].String(), at["msgaudit.action"].AsString(), at["messaging.message.id"].AsString())
		}
		h := handlerOf(got[0])
		if h == nil || len(children(others, h)["app.work"]) != 1 {
			t.Errorf("a: no handler span with the application's span under it")
		}
		if in := s.inside["a"]; len(in) != 1 || h == nil || in[0].SpanID() != h.SpanContext().SpanID() {
			t.Errorf("a's handler ran in %v; want its handler span", in)
		}
	}
	// b: two attempts, both in b's producer's trace; the first failed.
	got := inTrace(s.b)
	if len(got) != 2 {
		t.Fatalf("%d delivery spans in b's trace; want 2 (a failed attempt, then its retry)", len(got))
	}
	for _, sp := range got {
		at := attrs(sp.Attributes())
		switch at["msgaudit.attempt"].AsInt64() {
		case 1:
			if sp.Status().Code != codes.Error || at["msgaudit.action"].AsString() != "requeue" || !hasException(sp) {
				t.Errorf("b, attempt 1: status %v action %q; want Error, requeue, an exception", sp.Status(), at["msgaudit.action"].AsString())
			}
		case 2:
			if sp.Status().Code != codes.Unset || at["msgaudit.action"].AsString() != "ack" {
				t.Errorf("b, attempt 2: status %v action %q; want unset, ack", sp.Status(), at["msgaudit.action"].AsString())
			}
		default:
			t.Errorf("b: a delivery span with attempt %v", at["msgaudit.attempt"].String())
		}
		if handlerOf(sp) == nil {
			t.Errorf("b, attempt %v: no handler span", at["msgaudit.attempt"].String())
		}
	}
	for i, in := range s.inside["b"] {
		if in.TraceID() != s.b.trace {
			t.Errorf("b's run %d ran in trace %s; want its producer's %s", i+1, in.TraceID(), s.b.trace)
		}
	}
	// c: a root span of a trace no producer has.
	var roots []sdktrace.ReadOnlySpan
	for _, sp := range deliveries {
		if !sp.Parent().IsValid() {
			roots = append(roots, sp)
		}
	}
	if len(roots) != 1 {
		t.Errorf("%d delivery spans without a parent; want 1 (c's)", len(roots))
	} else if in := s.inside["c"]; len(in) != 1 || in[0].TraceID() != roots[0].SpanContext().TraceID() {
		t.Errorf("c's handler ran in %v; want c's own trace %s", in, roots[0].SpanContext().TraceID())
	}
	// a again: a duplicate in its own producer's trace, no handler.
	if got := inTrace(s.a2); len(got) != 1 {
		t.Errorf("%d delivery spans in the duplicate's trace; want 1", len(got))
	} else {
		at := attrs(got[0].Attributes())
		if !at["msgaudit.duplicate"].AsBool() || at["msgaudit.action"].AsString() != "ack" || at["msgaudit.handler.ran"].AsBool() {
			t.Errorf("duplicate: duplicate=%v action=%q ran=%v; want true, ack, false", at["msgaudit.duplicate"].String(),
				at["msgaudit.action"].AsString(), at["msgaudit.handler.ran"].String())
		}
		if handlerOf(got[0]) != nil {
			t.Error("the duplicate has a handler span")
		}
	}
	if s.runs["a"] != 1 || s.runs["b"] != 2 || s.runs["c"] != 1 {
		t.Errorf("handler runs %v; want a once, b twice, c once", s.runs)
	}
}

// TestActiveMQ runs the scenario through stompconsumer against ActiveMQ:
// the traceparent travels in STOMP headers. b's retry is the same delivery
// run again in place (the default), or, with a CopySecret, a copy the
// consumer sends, which keeps it.
func TestActiveMQ(t *testing.T) {
	addr := testenv.Getenv(t, "MSGAUDIT_STOMP_ADDR", "ActiveMQ's STOMP address")
	for _, mode := range []struct {
		name   string
		secret []byte
	}{{"in-place", nil}, {"copy", []byte("0123456789abcdef0123456789abcdef")}} {
		t.Run(mode.name, func(t *testing.T) {
			s := newScenario(t, "activemq")
			q := "/queue/" + uniq(t, "msgaudit.otel.")
			dlq := "/queue/" + uniq(t, "msgaudit.otel.dlq.")
			c, err := stompconsumer.New(stompconsumer.Config{
				Addresses:             []string{addr},
				Subscriptions:         []stompconsumer.Subscription{{Destination: q, Handler: s.handler}},
				DeadLetterDestination: dlq,
				KeyHeader:             "idem",
				CopySecret:            mode.secret,
				Pipeline:              s.pipeline(),
			})
			if err != nil {
				t.Fatal(err)
			}
			conn, err := stomp.Dial("tcp", addr, stomp.ConnOpt.AcceptVersion(stomp.V12), stomp.ConnOpt.HeartBeat(0, 0))
			if err != nil {
				t.Fatalf("dial %s: %v", addr, err)
			}
			defer conn.Disconnect()
			send := func(key string, p *producer) {
				t.Helper()
				opts := []func(*frame.Frame) error{stomp.SendOpt.Header("persistent", "true"), stomp.SendOpt.Header("idem", key),
					stomp.SendOpt.Receipt}
				if p != nil {
					opts = append(opts, stomp.SendOpt.Header("traceparent", p.traceparent()))
				}
				if err := conn.Send(q, "text/plain", []byte(key), opts...); err != nil {
					t.Fatal(err)
				}
			}
			stop := s.play(c.Run, send, func() { send("a", &s.a2) })
			stop()
			s.check("activemq", q)
			if st := c.Stats(); (mode.secret == nil) != (st.RetriesSent == 0) {
				t.Errorf("%s: %d retry copies sent, %d retries in place", mode.name, st.RetriesSent, st.LocalRetries)
			}
			for _, d := range []string{q, dlq} {
				if n := stompLeft(t, addr, d); n != 0 {
					t.Errorf("%d messages left on %s", n, d)
				}
			}
		})
	}
}

// stompLeft consumes and counts what is left on dest, waiting a second
// for the first message.
func stompLeft(t *testing.T, addr, dest string) int {
	t.Helper()
	conn, err := stomp.Dial("tcp", addr, stomp.ConnOpt.AcceptVersion(stomp.V12), stomp.ConnOpt.HeartBeat(0, 0))
	if err != nil {
		t.Fatalf("dial %s: %v", addr, err)
	}
	defer conn.Disconnect()
	sub, err := conn.Subscribe(dest, stomp.AckAuto)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for {
		select {
		case m, ok := <-sub.C:
			if !ok || m.Err != nil {
				return n
			}
			n++
		case <-time.After(time.Second):
			return n
		}
	}
}

// TestRabbitMQ runs the scenario through rabbitconsumer against
// RabbitMQ: the traceparent travels in the AMQP headers table, the key is
// the AMQP message id, and b's retry is the broker's redelivery.
func TestRabbitMQ(t *testing.T) {
	url := testenv.Getenv(t, "MSGAUDIT_AMQP_URL", "RabbitMQ's URL")
	s := newScenario(t, "rabbitmq")
	conn, err := amqp.Dial(url)
	if err != nil {
		t.Fatalf("dial RabbitMQ: %v", err)
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	if err := ch.Confirm(false); err != nil {
		t.Fatal(err)
	}
	q := uniq(t, "msgaudit.otel.")
	if _, err := ch.QueueDeclare(q, true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		c, err := amqp.Dial(url)
		if err != nil {
			t.Errorf("cleanup: %v", err)
			return
		}
		defer c.Close()
		cch, err := c.Channel()
		if err != nil {
			t.Errorf("cleanup: %v", err)
			return
		}
		for _, name := range []string{q, q + ".dlq"} {
			if n, err := cch.QueueDelete(name, false, false, false); err != nil {
				t.Errorf("cleanup: delete %s: %v", name, err)
			} else if n != 0 {
				t.Errorf("%d messages left on %s", n, name)
			}
		}
	})
	send := func(key string, p *producer) {
		t.Helper()
		pub := amqp.Publishing{MessageId: key, Body: []byte(key), DeliveryMode: amqp.Persistent}
		if p != nil {
			pub.Headers = amqp.Table{"traceparent": p.traceparent()}
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		dc, err := ch.PublishWithDeferredConfirmWithContext(ctx, "", q, false, false, pub)
		if err != nil {
			t.Fatal(err)
		}
		if ok, err := dc.WaitContext(ctx); err != nil || !ok {
			t.Fatalf("publish of %s not confirmed: %v %v", key, ok, err)
		}
	}
	c, err := rabbitconsumer.New(rabbitconsumer.Config{URL: url, Queue: q, Handler: s.handler,
		Pipeline: s.pipeline()})
	if err != nil {
		t.Fatal(err)
	}
	stop := s.play(c.Run, send, func() { send("a", &s.a2) })
	s.waitSettled(c.Stats)
	stop()
	s.check("rabbitmq", q)
}

// TestNATS runs the scenario through natsconsumer on a JetStream stream
// of its own: the producers' traceparent travels in NATS headers, and the
// delivery span names the stream, not the stream and consumer the
// consumer tracks its keys under. The stream's duplicate window is short,
// so that the second "a" (the same Nats-Msg-Id) is stored and delivered
// for the pipeline to absorb.
func TestNATS(t *testing.T) {
	url := testenv.Getenv(t, "MSGAUDIT_NATS_URL", "a NATS server with JetStream")
	s := newScenario(t, "nats")
	nc, err := nats.Connect(url, nats.Timeout(10*time.Second))
	if err != nil {
		t.Fatalf("connect %s: %v", url, err)
	}
	t.Cleanup(nc.Close) // after the streams' deletion: cleanups run last first
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	id := uniq(t, "")
	stream, subject := "msgaudit_otel_"+id, "msgaudit-otel-"+id+".orders"
	dlStream, dlSubject := "msgaudit_otel_dlq_"+id, "msgaudit-otel-"+id+"-dlq"
	ctx := testwait.Context(t, testwait.Long)
	for _, sc := range []jetstream.StreamConfig{
		{Name: stream, Subjects: []string{subject}, Storage: jetstream.FileStorage, Duplicates: 100 * time.Millisecond},
		{Name: dlStream, Subjects: []string{dlSubject}, Storage: jetstream.FileStorage},
	} {
		if _, err := js.CreateStream(ctx, sc); err != nil {
			t.Fatalf("create stream %s: %v", sc.Name, err)
		}
		t.Cleanup(func() {
			dctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if err := js.DeleteStream(dctx, sc.Name); err != nil && !errors.Is(err, jetstream.ErrStreamNotFound) {
				t.Errorf("cleanup: delete stream %s: %v", sc.Name, err)
			}
		})
	}
	send := func(key string, p *producer) bool {
		t.Helper()
		m := nats.NewMsg(subject)
		m.Data = []byte(key)
		m.Header.Set(jetstream.MsgIDHeader, key)
		if p != nil {
			m.Header.Set("traceparent", p.traceparent())
		}
		pctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		ack, err := js.PublishMsg(pctx, m)
		if err != nil {
			t.Fatalf("publish %s: %v", key, err)
		}
		return !ack.Duplicate
	}
	c, err := natsconsumer.New(natsconsumer.Config{URL: url, Stream: stream, Consumer: "worker", DeadLetterSubject: dlSubject,
		Handler: s.handler, ConnectTimeout: 10 * time.Second,
		Pipeline: s.pipeline()})
	if err != nil {
		t.Fatal(err)
	}
	stop := s.play(c.Run, func(key string, p *producer) { send(key, p) }, func() {
		// Past the stream's duplicate window the same Nats-Msg-Id is
		// stored again: the pipeline, not the stream, absorbs it.
		testwait.Until(t, time.Minute, "a second a stored past the stream's duplicate window", func() bool { return send("a", &s.a2) })
	})
	s.waitSettled(c.Stats)
	stop()
	s.check("nats", stream)
}
