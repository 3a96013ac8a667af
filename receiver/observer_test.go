package receiver_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/acemq/msgaudit/idempotency"
	"github.com/acemq/msgaudit/receiver"
)

type obsKey struct{}

// recorder is a receiver.Observer that writes every call it gets, in
// order, to log: one line per call.
type recorder struct {
	log      []string
	noResult bool // Start returns a nil Observation
}

func (r *recorder) Start(ctx context.Context, m *receiver.Message) (context.Context, receiver.Observation) {
	r.log = append(r.log, "start "+m.Key)
	if r.noResult {
		return ctx, nil
	}
	return context.WithValue(ctx, obsKey{}, "delivery"), (*observation)(r)
}

type observation recorder

func (o *observation) add(format string, args ...any) {
	o.log = append(o.log, fmt.Sprintf(format, args...))
}

func (o *observation) Selected(name string, d receiver.Decision, err error) {
	if err != nil {
		o.add("select %s error", name)
		return
	}
	o.add("select %s %s %s", name, d.Verdict, d.Reason)
}

func (o *observation) Handle(ctx context.Context) (context.Context, func(error)) {
	o.add("handle %v", ctx.Value(obsKey{}))
	return context.WithValue(ctx, obsKey{}, "handler"), func(err error) {
		o.add("handled %v", errText(err))
	}
}

func (o *observation) Settle(ctx context.Context, s receiver.Settlement) (context.Context, func(error)) {
	o.add("settle %s %v", s, ctx.Value(obsKey{}))
	return context.WithValue(ctx, obsKey{}, "settle"), func(err error) {
		o.add("settled %v", errText(err))
	}
}

func (o *observation) End(res receiver.Result) {
	o.add("end %s %s duplicate=%t attempt=%d", res.Action, res.Reason, res.Duplicate, res.Attempt)
}

func errText(err error) string {
	switch {
	case err == nil:
		return "ok"
	case errors.Is(err, receiver.ErrPanic):
		return "panic"
	}
	return err.Error()
}

// ctxSelector accepts every delivery and records, in its log, the
// observer's context value its Settle sees and its settlement; it fails
// its settlement when fail is set.
type ctxSelector struct {
	log  *[]string
	fail error
}

func (s ctxSelector) Name() string { return "ctx" }

func (s ctxSelector) Select(ctx context.Context, m *receiver.Message) (receiver.Decision, error) {
	*s.log = append(*s.log, fmt.Sprintf("selector sees %v", ctx.Value(obsKey{})))
	return receiver.Decision{Verdict: receiver.Accept, Reason: "new", Detail: "new",
		Settle: func(ctx context.Context, st receiver.Settlement) error {
			*s.log = append(*s.log, fmt.Sprintf("selector settles %s in %v", st, ctx.Value(obsKey{})))
			return s.fail
		}}, nil
}

// TestObserver: Config.Observer sees a delivery's start, each selector's
// decision, the handler (whose context it derives), the settlement (whose
// context it derives) and the Result, in that order, for new work, a
// duplicate, a failing and a panicking handler, a failed confirm and a
// missing key.
func TestObserver(t *testing.T) {
	store, err := idempotency.NewMemory(idempotency.Options{})
	if err != nil {
		t.Fatal(err)
	}
	rec := &recorder{}
	r, err := receiver.New(receiver.Config{Store: store, Observer: rec})
	if err != nil {
		t.Fatal(err)
	}
	handlerSaw := ""
	ok := func(ctx context.Context, m *receiver.Message) error {
		handlerSaw, _ = ctx.Value(obsKey{}).(string)
		return nil
	}
	check := func(name string, want ...string) {
		t.Helper()
		if got := strings.Join(rec.log, "\n"); got != strings.Join(want, "\n") {
			t.Errorf("%s: the observer saw\n%s\nwant\n%s", name, got, strings.Join(want, "\n"))
		}
		rec.log = nil
	}

	r.Process(context.Background(), msg("k1"), ok)
	check("new work",
		"start k1",
		"select memory accept new",
		"select store accept new",
		"handle delivery",
		"handled ok",
		"settle completed delivery",
		"settled ok",
		"end ack  duplicate=false attempt=1")
	if handlerSaw != "handler" {
		t.Errorf("the handler's context holds %q; want the one Observation.Handle derived", handlerSaw)
	}

	r.Process(context.Background(), msg("k1"), ok)
	check("duplicate",
		"start k1",
		"select memory reject audit",
		"end ack audit duplicate=true attempt=1")

	r.Process(context.Background(), msg("k2"), func(context.Context, *receiver.Message) error { return errors.New("boom") })
	check("failing handler",
		"start k2",
		"select memory accept new",
		"select store accept new",
		"handle delivery",
		"handled boom",
		"settle failed delivery",
		"settled ok",
		"end requeue handler-error duplicate=false attempt=1")

	r.Process(context.Background(), msg("k2"), func(context.Context, *receiver.Message) error { panic("bad") })
	check("panicking handler, second attempt",
		"start k2",
		"select memory accept new",
		"select store accept new",
		"handle delivery",
		"handled panic",
		"settle failed delivery",
		"settled ok",
		"end requeue panic duplicate=false attempt=2")

	r.Process(context.Background(), msg(""), ok)
	check("missing key", "start ", "end dead-letter missing-key duplicate=false attempt=1")

	// A duplicate handed to the handler (DuplicateDeliver) after a
	// restart: the memory tier accepts, the store knows the key; the
	// settlement comes before the handler.
	rec3 := &recorder{}
	r3, err := receiver.New(receiver.Config{Store: store, Observer: rec3, Duplicates: receiver.DuplicateDeliver})
	if err != nil {
		t.Fatal(err)
	}
	rec = rec3
	r3.Process(context.Background(), msg("k1"), ok)
	check("duplicate delivered after a restart",
		"start k1",
		"select memory accept new",
		"select store reject store",
		"settle completed delivery",
		"settled ok",
		"handle delivery",
		"handled ok",
		"end ack store duplicate=true attempt=1")

	// A selector whose confirm fails: the settlement's context is the one
	// Settle derived, and its error reaches the observer.
	var sel []string
	rec2 := &recorder{}
	r2, err := receiver.New(receiver.Config{MemoryOnly: true, Observer: rec2,
		Selectors: []receiver.Selector{ctxSelector{log: &sel, fail: errors.New("confirm lost")}}})
	if err != nil {
		t.Fatal(err)
	}
	rec = rec2
	r2.Process(context.Background(), msg("k3"), ok)
	check("failed confirm",
		"start k3",
		"select memory accept new",
		"select ctx accept new",
		"handle delivery",
		"handled ok",
		"settle completed delivery",
		"settled confirm lost",
		"end requeue confirm-error duplicate=false attempt=1")
	if got, want := strings.Join(sel, "; "), "selector sees delivery; selector settles completed in settle; selector settles failed in settle"; got != want {
		t.Errorf("the selector saw %q; want %q", got, want)
	}
}

// TestObserverNilObservation: an Observer whose Start returns a nil
// Observation sees nothing more of that delivery, and the delivery runs
// as without an Observer.
func TestObserverNilObservation(t *testing.T) {
	rec := &recorder{noResult: true}
	r, err := receiver.New(receiver.Config{MemoryOnly: true, Observer: rec})
	if err != nil {
		t.Fatal(err)
	}
	ran := false
	res := r.Process(context.Background(), msg("k1"), func(context.Context, *receiver.Message) error {
		ran = true
		return nil
	})
	if res.Action != receiver.Ack || !ran {
		t.Fatalf("result %+v, ran %t; want an ack after the handler ran", res, ran)
	}
	if got := strings.Join(rec.log, "; "); got != "start k1" {
		t.Fatalf("the observer saw %q; want only the start", got)
	}
}

// TestObserverNilPointer: an Observer interface holding a nil pointer is
// a configuration error from New.
func TestObserverNilPointer(t *testing.T) {
	var rec *recorder
	_, err := receiver.New(receiver.Config{MemoryOnly: true, Observer: rec})
	if !errors.Is(err, receiver.ErrConfig) {
		t.Fatalf("New with a nil *recorder as Observer: %v; want ErrConfig", err)
	}
}
