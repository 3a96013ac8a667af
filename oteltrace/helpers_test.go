package oteltrace_test

import (
	"context"
	"crypto/rand"
	"fmt"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/acemq/msgaudit/oteltrace"
	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
)

// The span and event names docs/tracing.md lists.
const (
	handlerSpan = "msgaudit.handler"
	settleSpan  = "msgaudit.settle"
	selectEvent = "msgaudit.select"
)

// newTracer returns a Tracer for system whose spans, once ended, the
// returned recorder holds; it samples every span.
func newTracer(t testing.TB, system string) (*oteltrace.Tracer, *tracetest.SpanRecorder, *sdktrace.TracerProvider) {
	t.Helper()
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec), sdktrace.WithSampler(sdktrace.AlwaysSample()))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	tr, err := oteltrace.New(oteltrace.Options{System: system, TracerProvider: tp})
	if err != nil {
		t.Fatal(err)
	}
	return tr, rec, tp
}

// producer is a producer's span context, as a traceparent header carries it.
type producer struct {
	trace trace.TraceID
	span  trace.SpanID
}

// newProducer returns a random sampled producer span context.
func newProducer(t testing.TB) producer {
	t.Helper()
	var p producer
	if _, err := rand.Read(p.trace[:]); err != nil {
		t.Fatal(err)
	}
	if _, err := rand.Read(p.span[:]); err != nil {
		t.Fatal(err)
	}
	return p
}

// traceparent is p's W3C traceparent header value.
func (p producer) traceparent() string {
	return fmt.Sprintf("00-%s-%s-01", p.trace, p.span)
}

// attrs returns a span's or an event's attributes by key.
func attrs(kvs []attribute.KeyValue) map[string]attribute.Value {
	m := make(map[string]attribute.Value, len(kvs))
	for _, kv := range kvs {
		m[string(kv.Key)] = kv.Value
	}
	return m
}

// spans returns the ended spans of rec, the delivery spans (kind
// Consumer) apart.
func spans(rec *tracetest.SpanRecorder) (deliveries, others []sdktrace.ReadOnlySpan) {
	for _, s := range rec.Ended() {
		if s.SpanKind() == trace.SpanKindConsumer {
			deliveries = append(deliveries, s)
		} else {
			others = append(others, s)
		}
	}
	return deliveries, others
}

// children returns the spans of all whose parent is s, by name.
func children(all []sdktrace.ReadOnlySpan, s sdktrace.ReadOnlySpan) map[string][]sdktrace.ReadOnlySpan {
	out := map[string][]sdktrace.ReadOnlySpan{}
	for _, c := range all {
		if c.Parent().SpanID() == s.SpanContext().SpanID() && c.SpanContext().TraceID() == s.SpanContext().TraceID() {
			out[c.Name()] = append(out[c.Name()], c)
		}
	}
	return out
}

// selectEvents returns a span's select events as "selector:verdict"
// strings, in order.
func selectEvents(s sdktrace.ReadOnlySpan) string {
	var out []string
	for _, e := range s.Events() {
		if e.Name != selectEvent {
			continue
		}
		a := attrs(e.Attributes)
		out = append(out, a["msgaudit.selector"].AsString()+":"+a["msgaudit.verdict"].AsString())
	}
	return strings.Join(out, " ")
}

// seen collects what the handler saw of its context: the trace and span
// it runs in, by message.
type seen struct {
	mu  sync.Mutex
	ids map[string][]trace.SpanContext
}

func (s *seen) add(name string, ctx context.Context) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ids == nil {
		s.ids = map[string][]trace.SpanContext{}
	}
	s.ids[name] = append(s.ids[name], trace.SpanContextFromContext(ctx))
}

// describe prints the spans of rec, one per line, for a failure message
// or a log.
func describe(rec *tracetest.SpanRecorder) string {
	var lines []string
	for _, s := range rec.Ended() {
		var kv []string
		for _, a := range s.Attributes() {
			kv = append(kv, string(a.Key)+"="+a.Value.String())
		}
		sort.Strings(kv)
		var ev []string
		for _, e := range s.Events() {
			var ea []string
			for _, a := range e.Attributes {
				if a.Key == "exception.stacktrace" {
					continue
				}
				ea = append(ea, string(a.Key)+"="+a.Value.String())
			}
			ev = append(ev, e.Name+"{"+strings.Join(ea, " ")+"}")
		}
		lines = append(lines, fmt.Sprintf("%s span=%s parent=%s trace=%s status=%s [%s] events=%s",
			s.Name(), s.SpanContext().SpanID(), s.Parent().SpanID(), s.SpanContext().TraceID(), s.Status().Code,
			strings.Join(kv, " "), strings.Join(ev, " ")))
	}
	return strings.Join(lines, "\n")
}
