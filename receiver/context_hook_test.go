package receiver_test

import (
	"context"
	"testing"

	"github.com/acemq/msgaudit/receiver"
)

type hookKey struct{}

// hookSelector accepts every delivery and hands the handler a value
// through Decision.Context.
type hookSelector struct {
	name, value string
	calls       int
}

func (s *hookSelector) Name() string { return s.name }

func (s *hookSelector) Select(ctx context.Context, m *receiver.Message) (receiver.Decision, error) {
	return receiver.Decision{Verdict: receiver.Accept, Detail: "new", Context: func(c context.Context) context.Context {
		s.calls++
		prev, _ := c.Value(hookKey{}).(string)
		return context.WithValue(c, hookKey{}, prev+s.value)
	}}, nil
}

// TestDecisionContext: the accepted decisions' Context hooks derive the
// handler's context in selector order; they are not called when the
// handler does not run.
func TestDecisionContext(t *testing.T) {
	a, b := &hookSelector{name: "a", value: "A"}, &hookSelector{name: "b", value: "B"}
	r, err := receiver.New(receiver.Config{Selectors: []receiver.Selector{a, b}})
	if err != nil {
		t.Fatal(err)
	}
	var got string
	res := r.Process(context.Background(), msg("k1"), func(ctx context.Context, m *receiver.Message) error {
		got, _ = ctx.Value(hookKey{}).(string)
		return nil
	})
	if res.Action != receiver.Ack || got != "AB" {
		t.Fatalf("handler saw %q (result %v); want \"AB\" and an ack", got, res.Action)
	}
	reject := receiver.SelectorFunc{Label: "no", Func: func(context.Context, *receiver.Message) (receiver.Verdict, string, error) {
		return receiver.Reject, "no", nil
	}}
	c := &hookSelector{name: "c", value: "C"}
	r, err = receiver.New(receiver.Config{Selectors: []receiver.Selector{c, reject}})
	if err != nil {
		t.Fatal(err)
	}
	res = r.Process(context.Background(), msg("k2"), func(ctx context.Context, m *receiver.Message) error {
		t.Error("handler ran for a rejected delivery")
		return nil
	})
	if !res.Duplicate || c.calls != 0 {
		t.Errorf("rejected delivery: duplicate=%v, Context hook called %d times; want a duplicate and no call", res.Duplicate, c.calls)
	}
}
