package oteltrace_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/acemq/msgaudit/internal/logkey"
	"github.com/acemq/msgaudit/receiver"
	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// huge is 1 MiB of text a producer controls.
func huge(c string) string { return strings.Repeat(c, 1<<20) }

// checkBounded fails t for every span name, status description and
// attribute (of a span or an event) longer than the receiver's bound on a
// logged key (the span name may add its "process " prefix).
func checkBounded(t *testing.T, spans []sdktrace.ReadOnlySpan) {
	t.Helper()
	check := func(where string, kvs []attribute.KeyValue) {
		for _, kv := range kvs {
			if n := len(kv.Value.String()); n > logkey.MaxBytes {
				t.Errorf("%s: attribute %s holds %d bytes; want at most %d", where, kv.Key, n, logkey.MaxBytes)
			}
		}
	}
	for _, s := range spans {
		if n := len(s.Name()); n > len("process ")+logkey.MaxBytes {
			t.Errorf("span name of %d bytes", n)
		}
		if n := len(s.Status().Description); n > logkey.MaxBytes {
			t.Errorf("span %.20s: status description of %d bytes", s.Name(), n)
		}
		check("span "+s.Name()[:min(len(s.Name()), 20)], s.Attributes())
		for _, e := range s.Events() {
			check("event "+e.Name, e.Attributes)
		}
	}
}

// TestHugeInputsBounded: a 1 MiB key, destination, consumer, derived key
// and handler error make a delivery span whose every attribute is within
// the bound the receiver's logs keep to; so do a selector's 1 MiB reason,
// detail and error and a result's 1 MiB reason.
func TestHugeInputsBounded(t *testing.T) {
	tr, rec, _ := newTracer(t, "activemq")
	r, err := receiver.New(receiver.Config{MemoryOnly: true, Observer: tr,
		KeyFunc: func(m *receiver.Message) (string, error) { return huge("d"), nil }})
	if err != nil {
		t.Fatal(err)
	}
	p := newProducer(t)
	m := &receiver.Message{Key: huge("k"), Destination: "/topic/" + huge("q"), Consumer: huge("c"), Body: []byte("b"),
		Headers: map[string]string{"traceparent": p.traceparent(), "tracestate": "vendor=" + huge("v"), "x-big": huge("h")}}
	if res := r.Process(context.Background(), m, func(context.Context, *receiver.Message) error {
		return errors.New(huge("e"))
	}); res.Action != receiver.Requeue {
		t.Fatalf("failing handler: %+v; want a requeue", res)
	}

	// The observation's other inputs, which selectors and the receiver
	// fill: a selector's verdict and error, a result's reason and error.
	_, obs := tr.Start(context.Background(), &receiver.Message{Key: "k", Destination: "/queue/q"})
	obs.Selected(huge("s"), receiver.Decision{Verdict: receiver.Reject, Reason: huge("r"), Detail: huge("t")}, nil)
	obs.Selected(huge("s"), receiver.Decision{}, errors.New(huge("x")))
	obs.End(receiver.Result{Action: receiver.Requeue, Reason: huge("y"), Err: errors.New(huge("z"))})

	all := rec.Ended()
	if len(all) < 4 {
		t.Fatalf("%d spans; want the delivery, its handler and settlement, and the second delivery", len(all))
	}
	checkBounded(t, all)
	// The exception events keep RecordError's form: the error's type, and
	// its message's head.
	var exceptions int
	for _, s := range all {
		for _, e := range s.Events() {
			if e.Name != "exception" {
				continue
			}
			exceptions++
			a := attrs(e.Attributes)
			if a["exception.type"].AsString() != "*errors.errorString" || !strings.HasPrefix(a["exception.message"].AsString(), strings.Repeat(a["exception.message"].AsString()[:1], 64)+"...(1048576 bytes, sha256 ") {
				t.Errorf("exception event %v", e.Attributes)
			}
		}
	}
	if exceptions != 3 {
		t.Errorf("%d exception events; want the delivery's, the handler's and the second delivery's", exceptions)
	}
}
