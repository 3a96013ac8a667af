package oteltrace_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/acemq/msgaudit/idempotency"
	"github.com/acemq/msgaudit/oteltrace"
	"github.com/acemq/msgaudit/receiver"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

const dest = "/queue/orders"

func message(key string, p *producer) *receiver.Message {
	m := &receiver.Message{Key: key, Destination: dest, Consumer: "c1", Body: []byte("body of " + key)}
	if p != nil {
		m.Headers = map[string]string{"traceparent": p.traceparent(), "tracestate": "vendor=x"}
	}
	return m
}

// delivery finds the one delivery span of trace p, failing the test when
// there is not exactly one.
func delivery(t *testing.T, deliveries []sdktrace.ReadOnlySpan, p producer) sdktrace.ReadOnlySpan {
	t.Helper()
	var found []sdktrace.ReadOnlySpan
	for _, s := range deliveries {
		if s.SpanContext().TraceID() == p.trace {
			found = append(found, s)
		}
	}
	if len(found) != 1 {
		t.Fatalf("%d delivery spans in the producer's trace %s; want 1", len(found), p.trace)
	}
	return found[0]
}

// TestDeliverySpan: a new delivery gets one consumer span, child of the
// producer's span from its traceparent header, with the messaging
// attributes, a select event per tier, the handler and the settlement as
// child spans, and the handler's own span nested under the handler's.
// The duplicate that follows is a span of its own trace, marked, with no
// handler span.
func TestDeliverySpan(t *testing.T) {
	tr, rec, tp := newTracer(t, "activemq")
	store, err := idempotency.NewMemory(idempotency.Options{})
	if err != nil {
		t.Fatal(err)
	}
	r, err := receiver.New(receiver.Config{Store: store, Observer: tr})
	if err != nil {
		t.Fatal(err)
	}
	p1, p2 := newProducer(t), newProducer(t)
	var inHandler trace.SpanContext
	res := r.Process(context.Background(), message("k1", &p1), func(ctx context.Context, m *receiver.Message) error {
		_, span := tp.Tracer("app").Start(ctx, "app.write")
		inHandler = span.SpanContext()
		span.End()
		return nil
	})
	if res.Action != receiver.Ack {
		t.Fatalf("first delivery: %+v; want an ack", res)
	}
	res = r.Process(context.Background(), message("k1", &p2), func(ctx context.Context, m *receiver.Message) error {
		t.Error("the duplicate's handler ran")
		return nil
	})
	if !res.Duplicate || res.Action != receiver.Ack {
		t.Fatalf("second delivery: %+v; want an acknowledged duplicate", res)
	}
	t.Logf("spans:\n%s", describe(rec))

	deliveries, others := spans(rec)
	if len(deliveries) != 2 {
		t.Fatalf("%d delivery spans; want 2", len(deliveries))
	}
	first := delivery(t, deliveries, p1)
	if first.Parent().SpanID() != p1.span || !first.Parent().IsRemote() {
		t.Errorf("first delivery's parent is %s (remote %t); want the producer's span %s", first.Parent().SpanID(), first.Parent().IsRemote(), p1.span)
	}
	if got := first.Parent().TraceState().Get("vendor"); got != "x" {
		t.Errorf("the parent's tracestate vendor=%q; want the header's \"x\"", got)
	}
	if first.Name() != "process "+dest {
		t.Errorf("span name %q; want %q", first.Name(), "process "+dest)
	}
	a := attrs(first.Attributes())
	for k, want := range map[string]string{
		"messaging.system": "activemq", "messaging.operation.type": "process", "messaging.operation.name": "process",
		"messaging.destination.name": dest, "messaging.message.id": "k1", "messaging.destination.subscription.name": "c1",
		"msgaudit.action": "ack",
	} {
		if got := a[k].AsString(); got != want {
			t.Errorf("attribute %s = %q; want %q", k, got, want)
		}
	}
	if a["msgaudit.attempt"].AsInt64() != 1 || a["msgaudit.duplicate"].AsBool() || !a["msgaudit.handler.ran"].AsBool() ||
		a["messaging.message.body.size"].AsInt64() != int64(len("body of k1")) {
		t.Errorf("attempt %v, duplicate %v, ran %v, body size %v; want 1, false, true, %d", a["msgaudit.attempt"].String(),
			a["msgaudit.duplicate"].String(), a["msgaudit.handler.ran"].String(), a["messaging.message.body.size"].String(), len("body of k1"))
	}
	if got := selectEvents(first); got != "memory:accept store:accept" {
		t.Errorf("select events %q; want memory:accept store:accept", got)
	}
	if first.Status().Code != codes.Unset {
		t.Errorf("status %v; want unset", first.Status())
	}
	kids := children(others, first)
	if len(kids[handlerSpan]) != 1 || len(kids[settleSpan]) != 1 || len(kids) != 2 {
		t.Fatalf("children of the delivery span: %v; want one %s and one %s", kids, handlerSpan, settleSpan)
	}
	if got := attrs(kids[settleSpan][0].Attributes())["msgaudit.settlement"].AsString(); got != "completed" {
		t.Errorf("settlement %q; want completed", got)
	}
	handler := kids[handlerSpan][0]
	app := children(others, handler)["app.write"]
	if len(app) != 1 || app[0].SpanContext().SpanID() != inHandler.SpanID() || inHandler.TraceID() != p1.trace {
		t.Errorf("the handler's own span %v is not the one child of the handler span in the producer's trace", inHandler)
	}

	dup := delivery(t, deliveries, p2)
	if dup.Parent().SpanID() != p2.span {
		t.Errorf("duplicate's parent %s; want its own producer's span %s", dup.Parent().SpanID(), p2.span)
	}
	da := attrs(dup.Attributes())
	if !da["msgaudit.duplicate"].AsBool() || da["msgaudit.reason"].AsString() != "audit" || da["msgaudit.handler.ran"].AsBool() {
		t.Errorf("duplicate: duplicate=%v reason=%q ran=%v; want true, audit, false", da["msgaudit.duplicate"].String(),
			da["msgaudit.reason"].AsString(), da["msgaudit.handler.ran"].String())
	}
	if got := selectEvents(dup); got != "memory:reject" {
		t.Errorf("duplicate's select events %q; want memory:reject", got)
	}
	if kids := children(others, dup); len(kids[handlerSpan]) != 0 {
		t.Errorf("the duplicate has a handler span")
	}
}

// TestStoreDuplicate: a second receiver sharing the store (another
// consumer, or this one after a restart) sees the key confirmed in the
// store: the span says the store tier rejected it.
func TestStoreDuplicate(t *testing.T) {
	tr, rec, _ := newTracer(t, "rabbitmq")
	store, err := idempotency.NewMemory(idempotency.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ok := func(context.Context, *receiver.Message) error { return nil }
	for i := range 2 {
		r, err := receiver.New(receiver.Config{Store: store, Observer: tr})
		if err != nil {
			t.Fatal(err)
		}
		p := newProducer(t)
		if res := r.Process(context.Background(), message("k1", &p), ok); res.Action != receiver.Ack || res.Duplicate != (i == 1) {
			t.Fatalf("delivery %d: %+v", i, res)
		}
		deliveries, _ := spans(rec)
		s := delivery(t, deliveries, p)
		want := "memory:accept store:accept"
		if i == 1 {
			want = "memory:accept store:reject"
			if a := attrs(s.Attributes()); !a["msgaudit.duplicate"].AsBool() || a["msgaudit.reason"].AsString() != "store" {
				t.Errorf("store duplicate: duplicate=%v reason=%q; want true, store", a["msgaudit.duplicate"].String(), a["msgaudit.reason"].AsString())
			}
		}
		if got := selectEvents(s); got != want {
			t.Errorf("delivery %d: select events %q; want %q", i, got, want)
		}
	}
}

// TestHandlerError: a failing handler's error is recorded on the handler's
// span and the delivery's, both with status Error; the settlement is a
// rollback; the retry is attempt 2 in the same producer's trace; a panic
// is marked.
func TestHandlerError(t *testing.T) {
	tr, rec, _ := newTracer(t, "activemq")
	r, err := receiver.New(receiver.Config{MemoryOnly: true, Observer: tr})
	if err != nil {
		t.Fatal(err)
	}
	p := newProducer(t)
	boom := errors.New("boom")
	if res := r.Process(context.Background(), message("k1", &p), func(context.Context, *receiver.Message) error { return boom }); res.Action != receiver.Requeue {
		t.Fatalf("failing handler: %+v; want a requeue", res)
	}
	if res := r.Process(context.Background(), message("k1", &p), func(context.Context, *receiver.Message) error { panic("bad") }); res.Action != receiver.Requeue {
		t.Fatalf("panicking handler: %+v; want a requeue", res)
	}
	t.Logf("spans:\n%s", describe(rec))
	deliveries, others := spans(rec)
	if len(deliveries) != 2 {
		t.Fatalf("%d delivery spans; want 2", len(deliveries))
	}
	for i, s := range deliveries {
		if s.SpanContext().TraceID() != p.trace || s.Parent().SpanID() != p.span {
			t.Errorf("attempt %d is not a child of the producer's span", i+1)
		}
		a := attrs(s.Attributes())
		reason := []string{"handler-error", "panic"}[i]
		if a["msgaudit.attempt"].AsInt64() != int64(i+1) || a["msgaudit.action"].AsString() != "requeue" || a["msgaudit.reason"].AsString() != reason {
			t.Errorf("attempt %d: attempt=%v action=%q reason=%q; want %d, requeue, %s", i+1, a["msgaudit.attempt"].String(),
				a["msgaudit.action"].AsString(), a["msgaudit.reason"].AsString(), i+1, reason)
		}
		if s.Status().Code != codes.Error || !hasException(s) {
			t.Errorf("attempt %d: status %v, exception recorded %t; want Error and an exception event", i+1, s.Status(), hasException(s))
		}
		kids := children(others, s)
		if len(kids[handlerSpan]) != 1 || len(kids[settleSpan]) != 1 {
			t.Fatalf("attempt %d: children %v; want a handler and a settle span", i+1, kids)
		}
		h := kids[handlerSpan][0]
		if h.Status().Code != codes.Error || !hasException(h) {
			t.Errorf("attempt %d: handler span status %v; want Error with the exception", i+1, h.Status())
		}
		if got := attrs(h.Attributes())["msgaudit.panic"].AsBool(); got != (i == 1) {
			t.Errorf("attempt %d: msgaudit.panic=%t", i+1, got)
		}
		if got := attrs(kids[settleSpan][0].Attributes())["msgaudit.settlement"].AsString(); got != "failed" {
			t.Errorf("attempt %d: settlement %q; want failed", i+1, got)
		}
	}
}

func hasException(s sdktrace.ReadOnlySpan) bool {
	for _, e := range s.Events() {
		if e.Name == "exception" {
			return true
		}
	}
	return false
}

// TestNoParentNoLeak: deliveries run concurrently, each with its own
// producer (and some with none), each get their own span in their own
// producer's trace, and the handler of each sees its own delivery's trace:
// no span is ever parented by another delivery's. A delivery without a
// traceparent starts a trace of its own.
func TestNoParentNoLeak(t *testing.T) {
	tr, rec, _ := newTracer(t, "rabbitmq")
	r, err := receiver.New(receiver.Config{MemoryOnly: true, Observer: tr, Handlers: 4})
	if err != nil {
		t.Fatal(err)
	}
	const n = 60
	producers := make([]*producer, n)
	for i := range producers {
		if i%3 != 0 {
			p := newProducer(t)
			producers[i] = &p
		}
	}
	var saw seen
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			key := fmt.Sprint("k", i)
			res := r.Process(context.Background(), message(key, producers[i]), func(ctx context.Context, m *receiver.Message) error {
				saw.add(m.Key, ctx)
				return nil
			})
			if res.Action != receiver.Ack {
				t.Errorf("%s: %+v", key, res)
			}
		})
	}
	wg.Wait()
	deliveries, others := spans(rec)
	if len(deliveries) != n {
		t.Fatalf("%d delivery spans; want %d", len(deliveries), n)
	}
	byKey := map[string]sdktrace.ReadOnlySpan{}
	traces := map[trace.TraceID]bool{}
	for _, s := range deliveries {
		byKey[attrs(s.Attributes())["messaging.message.id"].AsString()] = s
		traces[s.SpanContext().TraceID()] = true
	}
	if len(traces) != n {
		t.Errorf("%d traces for %d deliveries; want one each", len(traces), n)
	}
	for i, p := range producers {
		key := fmt.Sprint("k", i)
		s := byKey[key]
		if s == nil {
			t.Fatalf("no span for %s", key)
		}
		switch {
		case p == nil && s.Parent().IsValid():
			t.Errorf("%s has no traceparent but a parent %s", key, s.Parent().SpanID())
		case p != nil && (s.SpanContext().TraceID() != p.trace || s.Parent().SpanID() != p.span):
			t.Errorf("%s: trace %s parent %s; want its producer's %s %s", key, s.SpanContext().TraceID(), s.Parent().SpanID(), p.trace, p.span)
		}
		h := children(others, s)[handlerSpan]
		got := saw.ids[key]
		if len(h) != 1 || len(got) != 1 || got[0].SpanID() != h[0].SpanContext().SpanID() || got[0].TraceID() != s.SpanContext().TraceID() {
			t.Errorf("%s: the handler ran in %v, not in its own delivery's handler span", key, got)
		}
	}
}

// TestSelectorError: a selector's error is an event on the delivery span
// and the delivery's error, status Error.
func TestSelectorError(t *testing.T) {
	tr, rec, _ := newTracer(t, "activemq")
	down := receiver.SelectorFunc{Label: "metadata", Func: func(context.Context, *receiver.Message) (receiver.Verdict, string, error) {
		return 0, "", errors.New("metadata store down")
	}}
	r, err := receiver.New(receiver.Config{Selectors: []receiver.Selector{down}, Observer: tr})
	if err != nil {
		t.Fatal(err)
	}
	p := newProducer(t)
	if res := r.Process(context.Background(), message("k1", &p), func(context.Context, *receiver.Message) error { return nil }); res.Action != receiver.Requeue {
		t.Fatalf("%+v; want a requeue", res)
	}
	deliveries, others := spans(rec)
	s := delivery(t, deliveries, p)
	if got := selectEvents(s); got != "memory:accept metadata:error" {
		t.Errorf("select events %q; want memory:accept metadata:error", got)
	}
	if s.Status().Code != codes.Error || attrs(s.Attributes())["msgaudit.reason"].AsString() != "metadata-error" {
		t.Errorf("status %v reason %q; want Error, metadata-error", s.Status(), attrs(s.Attributes())["msgaudit.reason"].AsString())
	}
	kids := children(others, s)
	if len(kids[handlerSpan]) != 0 {
		t.Error("a handler span for a delivery whose handler never ran")
	}
	if st := kids[settleSpan]; len(st) != 1 || attrs(st[0].Attributes())["msgaudit.settlement"].AsString() != "abandoned" {
		t.Errorf("settle spans %v; want one, abandoned (the memory tier's bit rolled back)", st)
	}
}

// TestOptions: System is required; the global provider and W3C Trace
// Context are the defaults.
func TestOptions(t *testing.T) {
	if _, err := oteltrace.New(oteltrace.Options{}); !errors.Is(err, receiver.ErrConfig) {
		t.Fatalf("New without System: %v; want ErrConfig", err)
	}
	tr, err := oteltrace.New(oteltrace.Options{System: "kafka"})
	if err != nil {
		t.Fatal(err)
	}
	// The global provider is a no-op until the program sets one, yet the
	// producer's context still reaches the handler through the propagator.
	p := newProducer(t)
	r, err := receiver.New(receiver.Config{MemoryOnly: true, Observer: tr})
	if err != nil {
		t.Fatal(err)
	}
	var got trace.SpanContext
	r.Process(context.Background(), message("k1", &p), func(ctx context.Context, m *receiver.Message) error {
		got = trace.SpanContextFromContext(ctx)
		return nil
	})
	if got.TraceID() != p.trace {
		t.Errorf("with the default propagator the handler runs in trace %s; want the producer's %s", got.TraceID(), p.trace)
	}
}
