package oteltrace_test

import (
	"context"
	"fmt"
	"log"
	"sort"
	"strings"

	"github.com/acemq/msgaudit/oteltrace"
	"github.com/acemq/msgaudit/receiver"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
)

// Example traces a delivery and its redelivery through a Receiver: the
// producer's traceparent header makes the delivery's span a child of the
// producer's, the handler's context carries the handler's span (the
// application's own span nests under it), and the redelivery is marked a
// duplicate. A program sets its exporter in the TracerProvider; here an
// in-memory recorder prints what was recorded.
func Example() {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	defer func() { _ = tp.Shutdown(context.Background()) }()

	tracer, err := oteltrace.New(oteltrace.Options{System: "rabbitmq", TracerProvider: tp})
	if err != nil {
		log.Fatal(err)
	}
	r, err := receiver.New(receiver.Config{MemoryOnly: true, Observer: tracer})
	if err != nil {
		log.Fatal(err)
	}
	handler := func(ctx context.Context, m *receiver.Message) error {
		_, span := tp.Tracer("app").Start(ctx, "INSERT orders") // the application's own work
		span.End()
		return nil
	}
	for _, redelivered := range []bool{false, true} {
		m := &receiver.Message{Key: "order-1", Destination: "orders", Body: []byte(`{"id":1}`), Redelivered: redelivered,
			Headers: map[string]string{"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}}
		r.Process(context.Background(), m, handler)
	}

	names := map[trace.SpanID]string{}
	for _, s := range rec.Ended() {
		names[s.SpanContext().SpanID()] = s.Name()
	}
	for _, s := range rec.Ended() {
		parent := names[s.Parent().SpanID()]
		if s.Parent().IsRemote() {
			parent = "the producer's span " + s.Parent().SpanID().String()
		}
		fmt.Printf("%s (trace %s), child of %s\n", s.Name(), s.SpanContext().TraceID(), parent)
		var kv []string
		for _, a := range s.Attributes() {
			kv = append(kv, string(a.Key)+"="+a.Value.String())
		}
		sort.Strings(kv)
		for _, a := range kv {
			fmt.Println("   ", a)
		}
		for _, e := range s.Events() {
			var ea []string
			for _, a := range e.Attributes {
				ea = append(ea, a.Value.String())
			}
			fmt.Printf("    event %s: %s\n", e.Name, strings.Join(ea, " "))
		}
	}
	// Output:
	// INSERT orders (trace 4bf92f3577b34da6a3ce929d0e0e4736), child of msgaudit.handler
	// msgaudit.handler (trace 4bf92f3577b34da6a3ce929d0e0e4736), child of process orders
	// msgaudit.settle (trace 4bf92f3577b34da6a3ce929d0e0e4736), child of process orders
	//     msgaudit.settlement=completed
	// process orders (trace 4bf92f3577b34da6a3ce929d0e0e4736), child of the producer's span 00f067aa0ba902b7
	//     messaging.destination.name=orders
	//     messaging.message.body.size=8
	//     messaging.message.id=order-1
	//     messaging.operation.name=process
	//     messaging.operation.type=process
	//     messaging.system=rabbitmq
	//     msgaudit.action=ack
	//     msgaudit.attempt=1
	//     msgaudit.duplicate=false
	//     msgaudit.handler.ran=true
	//     msgaudit.redelivered=false
	//     event msgaudit.select: memory accept new untracked
	// process orders (trace 4bf92f3577b34da6a3ce929d0e0e4736), child of the producer's span 00f067aa0ba902b7
	//     messaging.destination.name=orders
	//     messaging.message.body.size=8
	//     messaging.message.id=order-1
	//     messaging.operation.name=process
	//     messaging.operation.type=process
	//     messaging.system=rabbitmq
	//     msgaudit.action=ack
	//     msgaudit.attempt=1
	//     msgaudit.duplicate=true
	//     msgaudit.handler.ran=false
	//     msgaudit.reason=audit
	//     msgaudit.redelivered=true
	//     event msgaudit.select: memory reject audit completed
}
