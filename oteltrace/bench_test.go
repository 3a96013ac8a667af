package oteltrace_test

import (
	"context"
	"strconv"
	"testing"

	"github.com/acemq/msgaudit/idempotency"
	"github.com/acemq/msgaudit/oteltrace"
	"github.com/acemq/msgaudit/receiver"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// discard is a span processor that drops every span: the SDK's cost of
// recording without an exporter's.
type discard struct{}

func (discard) OnStart(context.Context, sdktrace.ReadWriteSpan) {}
func (discard) OnEnd(sdktrace.ReadOnlySpan)                     {}
func (discard) Shutdown(context.Context) error                  { return nil }
func (discard) ForceFlush(context.Context) error                { return nil }

// BenchmarkProcess measures one new delivery with a traceparent through a
// memory-store pipeline: without an Observer (observer=none), with a
// Tracer on a no-op provider (observer=noop: extraction and context only),
// and with a Tracer on the SDK sampling every span into a processor that
// drops it (observer=sdk: recording the spans, not exporting them).
func BenchmarkProcess(b *testing.B) {
	for _, obs := range []string{"none", "noop", "sdk"} {
		b.Run("observer="+obs, func(b *testing.B) {
			store, err := idempotency.NewMemory(idempotency.Options{})
			if err != nil {
				b.Fatal(err)
			}
			defer store.Close()
			cfg := receiver.Config{Store: store, Completed: 1 << 20}
			switch obs {
			case "noop":
				cfg.Observer, err = oteltrace.New(oteltrace.Options{System: "activemq", TracerProvider: noop.NewTracerProvider()})
			case "sdk":
				tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(discard{}), sdktrace.WithSampler(sdktrace.AlwaysSample()))
				defer func() { _ = tp.Shutdown(context.Background()) }()
				cfg.Observer, err = oteltrace.New(oteltrace.Options{System: "activemq", TracerProvider: tp})
			}
			if err != nil {
				b.Fatal(err)
			}
			r, err := receiver.New(cfg)
			if err != nil {
				b.Fatal(err)
			}
			p := newProducer(b)
			headers := map[string]string{"traceparent": p.traceparent()}
			ok := func(context.Context, *receiver.Message) error { return nil }
			b.ReportAllocs()
			b.ResetTimer()
			for i := range b.N {
				m := &receiver.Message{Key: "k" + strconv.Itoa(i), Destination: dest, Headers: headers}
				if res := r.Process(context.Background(), m, ok); res.Action != receiver.Ack {
					b.Fatalf("%+v", res)
				}
			}
		})
	}
}
