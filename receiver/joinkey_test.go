package receiver_test

import (
	"context"
	"strings"
	"testing"

	"github.com/acemq/msgaudit/idempotency"
	"github.com/acemq/msgaudit/receiver"
)

// collidingPairs are two deliveries each that a non-injective join of
// scope and key (or of destination and consumer) gives one key: each
// must run its handler.
var collidingPairs = []struct {
	name string
	a, b receiver.Message
}{
	{"long keys across queues", // hashed without the scope's length
		receiver.Message{Destination: "/queue/q1", Key: strings.Repeat("X", receiver.MaxKeyBytes)},
		receiver.Message{Destination: "/queue/q", Key: "1" + strings.Repeat("X", receiver.MaxKeyBytes)}},
	{"NUL in a destination", // "k" + scope + NUL + key
		receiver.Message{Destination: "/queue/a\x00b", Key: "c"},
		receiver.Message{Destination: "/queue/a", Key: "b\x00c"}},
	{"short keys across queues", // "k" + scope + key
		receiver.Message{Destination: "/queue/q1", Key: "X"},
		receiver.Message{Destination: "/queue/q", Key: "1X"}},
	{"'#' in a consumer", // destination + "#" + consumer
		receiver.Message{Destination: "/topic/a#b", Consumer: "c", Key: "k"},
		receiver.Message{Destination: "/topic/a", Consumer: "b#c", Key: "k"}},
	{"'#' in a long-key consumer",
		receiver.Message{Destination: "/topic/a#b", Consumer: "c", Key: strings.Repeat("k", receiver.MaxKeyBytes)},
		receiver.Message{Destination: "/topic/a", Consumer: "b#c", Key: strings.Repeat("k", receiver.MaxKeyBytes)}},
	{"escaped '#' in a consumer",
		receiver.Message{Destination: "/topic/a", Consumer: "b%23c", Key: "k"},
		receiver.Message{Destination: "/topic/a", Consumer: "b#c", Key: "k"}},
}

// TestCollidingKeysBothRun runs each colliding pair through a receiver,
// table only and with a store: the second delivery is new, so its handler
// runs (a shared key made it a "duplicate", acknowledged without running:
// lost).
func TestCollidingKeysBothRun(t *testing.T) {
	configs := []struct {
		name string
		cfg  func(testing.TB) receiver.Config
	}{
		{"table", func(testing.TB) receiver.Config { return receiver.Config{MemoryOnly: true} }},
		{"store", func(t testing.TB) receiver.Config {
			return receiver.Config{Store: memStore(t, idempotency.Options{}), Completed: 1 << 10}
		}},
	}
	for _, c := range configs {
		for _, p := range collidingPairs {
			t.Run(c.name+"/"+p.name, func(t *testing.T) {
				r, err := receiver.New(c.cfg(t))
				if err != nil {
					t.Fatal(err)
				}
				for i, m := range []receiver.Message{p.a, p.b} {
					ran := false
					res := r.Process(context.Background(), &m, func(context.Context, *receiver.Message) error { ran = true; return nil })
					if !ran || res.Action != receiver.Ack || res.Duplicate {
						t.Fatalf("delivery %d (%q, consumer %q): ran %t, %+v; want its handler run", i+1, m.Destination, m.Consumer, ran, res)
					}
				}
				// Each is still known as itself.
				for i, m := range []receiver.Message{p.a, p.b} {
					if res := r.Process(context.Background(), &m, func(context.Context, *receiver.Message) error { return nil }); !res.Duplicate {
						t.Fatalf("redelivery %d not a duplicate: %+v", i+1, res)
					}
				}
			})
		}
	}
}

// TestStoreNamespaceInjective: the store namespaces of a colliding topic
// pair differ, and an ordinary consumer name is joined as
// before ("destination#consumer"), so stored keys keep their form.
func TestStoreNamespaceInjective(t *testing.T) {
	namers := map[string]func(m *receiver.Message) string{
		"store":       func(m *receiver.Message) string { return receiver.StoreNamespace("", m) },
		"store fixed": func(m *receiver.Message) string { return receiver.StoreNamespace("app#x", m) },
	}
	pairs := [][2]receiver.Message{
		{{Destination: "/topic/a#b", Consumer: "c"}, {Destination: "/topic/a", Consumer: "b#c"}},
		{{Destination: "/topic/a", Consumer: "x#c"}, {Destination: "/topic/a", Consumer: "x%23c"}},
		{{Destination: "/topic/a", Consumer: "c"}, {Destination: "/topic/b", Consumer: "c"}},
	}
	for name, ns := range namers {
		for _, p := range pairs {
			a, b := p[0], p[1]
			if ns(&a) == ns(&b) && (name == "store" || a.Consumer != b.Consumer) {
				t.Errorf("%s: (%q, %q) and (%q, %q) share the namespace %q", name, a.Destination, a.Consumer, b.Destination, b.Consumer, ns(&a))
			}
		}
		m := receiver.Message{Destination: "/topic/t", Consumer: "sub-1"}
		want := "/topic/t#sub-1"
		if strings.HasSuffix(name, "fixed") {
			want = "app#x#sub-1"
		}
		if got := ns(&m); got != want {
			t.Errorf("%s: namespace of an ordinary consumer %q, want %q", name, got, want)
		}
	}
}
