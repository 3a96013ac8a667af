// Package oteltrace traces msgaudit's deliveries with OpenTelemetry: one
// consumer span per delivery, following OpenTelemetry's semantic
// conventions for messaging, continued from the producer's trace context
// found in the message's headers (W3C traceparent and tracestate), with an
// event for each tier's verdict and child spans for the handler and the
// settlement (a store's confirm or release, the inbox's commit).
//
// A Tracer is a receiver.Observer: set it as receiver.Config.Observer (the
// Pipeline of a stompconsumer or rabbitconsumer Config, or the Config of a
// hand-written consumer's Receiver). The handler's context carries its
// span, so the spans the handler starts (a database call, an HTTP request)
// nest under the delivery's. docs/tracing.md lists every span, attribute
// and event.
//
// The package is a module of its own: the library's core packages import
// no OpenTelemetry module, and a program that does not trace links none.
// It depends on OpenTelemetry's API only; the program brings the SDK and
// an exporter.
package oteltrace

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"

	"github.com/acemq/msgaudit/internal/keyjoin"
	"github.com/acemq/msgaudit/internal/logkey"
	"github.com/acemq/msgaudit/receiver"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
)

// scopeName is the instrumentation scope of the spans a Tracer makes.
const scopeName = "github.com/acemq/msgaudit/oteltrace"

// The names of the handler's and the settlement's child spans and of the
// event of each selector's verdict.
const (
	handlerSpan = "msgaudit.handler"
	settleSpan  = "msgaudit.settle"
	selectEvent = "msgaudit.select"
)

// The attributes of msgaudit's own, besides the messaging.* ones of the
// semantic conventions.
const (
	attrAttempt     = attribute.Key("msgaudit.attempt")
	attrRedelivered = attribute.Key("msgaudit.redelivered")
	attrDuplicate   = attribute.Key("msgaudit.duplicate")
	attrAction      = attribute.Key("msgaudit.action")
	attrReason      = attribute.Key("msgaudit.reason")
	attrRan         = attribute.Key("msgaudit.handler.ran")
	attrKey         = attribute.Key("msgaudit.key")
	attrSelector    = attribute.Key("msgaudit.selector")
	attrVerdict     = attribute.Key("msgaudit.verdict")
	attrDetail      = attribute.Key("msgaudit.detail")
	attrError       = attribute.Key("msgaudit.error")
	attrSettlement  = attribute.Key("msgaudit.settlement")
	attrPanic       = attribute.Key("msgaudit.panic")
)

// Options configure a Tracer.
type Options struct {
	// System is the messaging system, the messaging.system attribute:
	// "activemq" for stompconsumer on ActiveMQ, "rabbitmq" for
	// rabbitconsumer, the semantic conventions' name of any other
	// ("kafka", "aws_sqs"). Required: the receiver does not know its
	// transport.
	System string
	// TracerProvider makes the tracer; nil means the global one
	// (otel.GetTracerProvider).
	TracerProvider trace.TracerProvider
	// Propagator extracts the producer's trace context from the message's
	// headers; nil means W3C Trace Context (propagation.TraceContext: the
	// traceparent and tracestate headers). Set it to
	// otel.GetTextMapPropagator() to use the program's global propagator.
	Propagator propagation.TextMapPropagator
}

// Tracer traces deliveries: it is a receiver.Observer. It is safe for
// concurrent use, and one Tracer may serve several Receivers of the same
// messaging system.
type Tracer struct {
	system attribute.KeyValue
	tracer trace.Tracer
	prop   propagation.TextMapPropagator
}

// New returns a Tracer for o. An empty System is an error wrapping
// receiver.ErrConfig.
func New(o Options) (*Tracer, error) {
	if o.System == "" {
		return nil, fmt.Errorf("%w: oteltrace: Options.System is empty; name the messaging system (\"activemq\", \"rabbitmq\", ...)", receiver.ErrConfig)
	}
	tp := o.TracerProvider
	if tp == nil {
		tp = otel.GetTracerProvider()
	}
	prop := o.Propagator
	if prop == nil {
		prop = propagation.TraceContext{}
	}
	return &Tracer{system: semconv.MessagingSystemKey.String(o.System), tracer: tp.Tracer(scopeName), prop: prop}, nil
}

// destination is m's destination without the consumer a transport joined
// to it to make one scope per consumer (natsconsumer's "stream#consumer"):
// the stream, as the span names it; the consumer is its own attribute.
func destination(m *receiver.Message) string {
	if m.Consumer == "" {
		return m.Destination
	}
	return strings.TrimSuffix(m.Destination, keyjoin.Topic("", m.Consumer))
}

// bound is how a span holds text that comes from a message or a selector
// (a key, a destination, a reason, an error): whole up to 256 bytes, else
// its head, length and SHA-256, as the receiver logs a key
// (logkey.String), so a span stays bounded whatever producers send.
func bound(s string) string { return logkey.String(s) }

// recordError records err as span.RecordError does, an "exception" event
// with the error's type and message, the message bounded.
func recordError(span trace.Span, err error) {
	if !span.IsRecording() {
		return
	}
	span.AddEvent(semconv.ExceptionEventName, trace.WithAttributes(
		semconv.ExceptionType(bound(typeName(err))), semconv.ExceptionMessage(bound(err.Error()))))
}

// typeName is the exception.type of err, as the SDK's RecordError names
// it: the package path and name of its type, or the type itself for an
// unnamed one (a pointer).
func typeName(err error) string {
	t := reflect.TypeOf(err)
	if t.PkgPath() == "" && t.Name() == "" {
		return t.String()
	}
	return t.PkgPath() + "." + t.Name()
}

// Start begins the delivery's consumer span, named "process " and the
// destination (bounded as every text of the span is). Its parent is the producer's span context found in m's
// headers; without one, the span ctx carries, if any (a hand-written
// consumer's request span), else the span is the root of a new trace.
// The returned context carries the span.
func (t *Tracer) Start(ctx context.Context, m *receiver.Message) (context.Context, receiver.Observation) {
	ctx = t.prop.Extract(ctx, propagation.MapCarrier(m.Headers))
	dest := bound(destination(m))
	attrs := make([]attribute.KeyValue, 0, 9)
	attrs = append(attrs, t.system,
		semconv.MessagingOperationTypeProcess,
		semconv.MessagingOperationName("process"),
		semconv.MessagingDestinationName(dest),
		semconv.MessagingMessageBodySize(len(m.Body)),
		attrRedelivered.Bool(m.Redelivered))
	if m.Consumer != "" {
		attrs = append(attrs, semconv.MessagingDestinationSubscriptionName(bound(m.Consumer)))
	}
	if m.Key != "" {
		attrs = append(attrs, semconv.MessagingMessageID(bound(m.Key)))
	}
	ctx, span := t.tracer.Start(ctx, "process "+dest,
		trace.WithSpanKind(trace.SpanKindConsumer), trace.WithAttributes(attrs...))
	return ctx, &delivery{t: t, span: span, m: m}
}

// delivery is the Observation of one delivery: its span.
type delivery struct {
	t    *Tracer
	span trace.Span
	m    *receiver.Message
}

// Selected adds a msgaudit.select event with the selector's verdict, reason and
// detail, or its error.
func (d *delivery) Selected(name string, dec receiver.Decision, err error) {
	if err != nil {
		d.span.AddEvent(selectEvent, trace.WithAttributes(attrSelector.String(bound(name)), attrVerdict.String("error"),
			attrError.String(bound(err.Error()))))
		return
	}
	d.span.AddEvent(selectEvent, trace.WithAttributes(attrSelector.String(bound(name)), attrVerdict.String(dec.Verdict.String()),
		attrReason.String(bound(dec.Reason)), attrDetail.String(bound(dec.Detail))))
}

// Handle starts the handler's child span; the handler's context carries it.
func (d *delivery) Handle(ctx context.Context) (context.Context, func(error)) {
	ctx, span := d.t.tracer.Start(ctx, handlerSpan, trace.WithSpanKind(trace.SpanKindInternal))
	return ctx, func(err error) {
		if err != nil {
			if errors.Is(err, receiver.ErrPanic) {
				span.SetAttributes(attrPanic.Bool(true))
			}
			recordError(span, err)
			span.SetStatus(codes.Error, "handler failed")
		}
		span.End()
	}
}

// Settle starts the settlement's child span.
func (d *delivery) Settle(ctx context.Context, s receiver.Settlement) (context.Context, func(error)) {
	ctx, span := d.t.tracer.Start(ctx, settleSpan, trace.WithSpanKind(trace.SpanKindInternal),
		trace.WithAttributes(attrSettlement.String(s.String())))
	return ctx, func(err error) {
		if err != nil {
			recordError(span, err)
			span.SetStatus(codes.Error, "settlement failed")
		}
		span.End()
	}
}

// End sets the delivery's outcome on its span, records its error (status
// Error) and ends it.
func (d *delivery) End(res receiver.Result) {
	attrs := []attribute.KeyValue{
		attrAttempt.Int(res.Attempt),
		attrAction.String(res.Action.String()),
		attrDuplicate.Bool(res.Duplicate),
		attrRan.Bool(res.Ran),
	}
	if res.Reason != "" {
		attrs = append(attrs, attrReason.String(bound(res.Reason)))
	}
	if k := d.m.IdempotencyKey(); k != d.m.Key {
		attrs = append(attrs, attrKey.String(bound(k)))
	}
	d.span.SetAttributes(attrs...)
	if res.Err != nil {
		recordError(d.span, res.Err)
		d.span.SetStatus(codes.Error, bound(res.Reason))
	}
	d.span.End()
}
