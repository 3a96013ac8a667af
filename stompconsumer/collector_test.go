package stompconsumer

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

func TestCollector(t *testing.T) {
	t.Parallel()
	c, err := New(Config{MemoryOnly: true, Addresses: []string{"h"}, Subscriptions: []Subscription{{Destination: "/queue/a", Handler: nopHandler}}})
	if err != nil {
		t.Fatal(err)
	}
	c.st.retriesSent.Add(3)
	c.st.oversized.Add(1)
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(c.Collector(), c.Metrics().Collector("stomp"))
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, f := range families {
		for _, m := range f.GetMetric() {
			if m.GetCounter() != nil {
				got[f.GetName()] += m.GetCounter().GetValue()
			}
		}
	}
	for name, want := range map[string]float64{
		"msgaudit_stomp_retry_copies_total": 3, "msgaudit_stomp_oversized_total": 1,
		"msgaudit_stomp_connects_total": 0, "msgaudit_receiver_delivered_total": 0,
	} {
		v, ok := got[name]
		if !ok || v != want {
			t.Errorf("%s = %v (present %v), want %v", name, v, ok, want)
		}
	}
	if len(got) < 20 {
		t.Errorf("only %d counters gathered", len(got))
	}
}
