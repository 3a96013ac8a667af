package outboxid

import (
	"context"
	"strings"
	"testing"

	"pgregory.net/rapid"
)

// TestDeriveInjective: two different (namespace, key, position) never
// share an id, whatever separators they hold.
func TestDeriveInjective(t *testing.T) {
	s := rapid.StringOfN(rapid.SampledFrom([]rune{'a', ':', 0, '#', '/'}), 0, 6, -1)
	rapid.Check(t, func(t *rapid.T) {
		n1, k1, n2, k2 := s.Draw(t, "n1"), s.Draw(t, "k1"), s.Draw(t, "n2"), s.Draw(t, "k2")
		p1, p2 := rapid.Uint64Range(0, 3).Draw(t, "p1"), rapid.Uint64Range(0, 3).Draw(t, "p2")
		if (n1 != n2 || k1 != k2 || p1 != p2) && Derive(n1, k1, p1) == Derive(n2, k2, p2) {
			t.Fatalf("(%q,%q,%d) and (%q,%q,%d) share an id", n1, k1, p1, n2, k2, p2)
		}
	})
	if Derive("ab", "c", 0) == Derive("a", "bc", 0) {
		t.Fatal("the join of namespace and key is ambiguous")
	}
}

// TestNextCountsPerRun: each run carried by With counts from zero; a
// context without a run gets random ids.
func TestNextCountsPerRun(t *testing.T) {
	run := func() []string {
		ctx := With(context.Background(), "ns", "k", nil)
		return []string{Next(ctx), Next(ctx)}
	}
	a, b := run(), run()
	if a[0] != b[0] || a[1] != b[1] || a[0] == a[1] {
		t.Fatalf("runs sent %v and %v; want the same two distinct ids", a, b)
	}
	if r1, r2 := Next(context.Background()), Next(context.Background()); r1 == r2 || !strings.HasPrefix(r1, "r-") {
		t.Fatalf("random ids %q %q", r1, r2)
	}
	for _, id := range append(a, Random()) {
		if !Valid(id) {
			t.Errorf("Valid(%q) = false for an id the outbox writes", id)
		}
	}
}

func TestValid(t *testing.T) {
	for _, c := range []struct {
		id string
		ok bool
	}{
		{"d-0123", true}, {"", false}, {strings.Repeat("a", MaxLen), true}, {strings.Repeat("a", MaxLen+1), false},
		{"a b", false}, {"a:b", false}, {"a\nb", false}, {"a\\b", false}, {"é", false},
	} {
		if Valid(c.id) != c.ok {
			t.Errorf("Valid(%q) = %v", c.id, !c.ok)
		}
	}
	if Key("x") != "outbox:x" || strings.HasPrefix(Key("x"), "ID:") {
		t.Errorf("Key(x) = %q", Key("x"))
	}
}

// TestTraceContext: a well-formed traceparent rides along; a forged or
// oversized one is dropped.
func TestTraceContext(t *testing.T) {
	good := "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
	for _, c := range []struct {
		h          map[string]string
		parent, st string
	}{
		{map[string]string{"traceparent": good, "tracestate": "a=b"}, good, "a=b"},
		{map[string]string{"traceparent": good, "tracestate": strings.Repeat("x", 513)}, good, ""},
		{map[string]string{"traceparent": good, "tracestate": "a=b\ninjected:1"}, good, ""},
		{map[string]string{"traceparent": good + "\ninjected:1"}, "", ""},
		{map[string]string{"traceparent": strings.ToUpper(good)}, "", ""},
		{map[string]string{"traceparent": "01" + good[2:]}, "", ""},
		{map[string]string{"traceparent": strings.Repeat("0", 1<<20)}, "", ""},
		{nil, "", ""},
	} {
		p, s := Trace(With(context.Background(), "n", "k", c.h))
		if p != c.parent || s != c.st {
			t.Errorf("headers %.80q: trace (%q, %q), want (%q, %q)", c.h, p, s, c.parent, c.st)
		}
	}
}
