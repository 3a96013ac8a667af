package promexport_test

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/acemq/msgaudit/promexport"
	"github.com/acemq/msgaudit/receiver"
	"github.com/acemq/msgaudit/stompconsumer"
)

// TestSTOMP: the transport counters export as msgaudit_stomp_*, beside the
// pipeline's msgaudit_receiver_*, and are read at every scrape.
func TestSTOMP(t *testing.T) {
	t.Parallel()
	st := stompconsumer.Stats{RetriesSent: 3, Oversized: 1}
	var m receiver.Metrics
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(promexport.STOMP(func() stompconsumer.Stats { return st }), promexport.Receiver(m.Snapshot, "stomp"))
	gather := func() map[string]float64 {
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
		return got
	}
	got := gather()
	for name, want := range map[string]float64{
		"msgaudit_stomp_retry_copies_total": 3, "msgaudit_stomp_oversized_total": 1,
		"msgaudit_stomp_connects_total": 0, "msgaudit_receiver_delivered_total": 0,
	} {
		v, ok := got[name]
		if !ok || v != want {
			t.Errorf("%s = %v (present %v), want %v", name, v, ok, want)
		}
	}
	// Any function returning the STOMPStats shape is accepted, not only
	// stompconsumer's Stats.
	reg2 := prometheus.NewPedanticRegistry()
	reg2.MustRegister(promexport.STOMP(func() promexport.STOMPStats { return promexport.STOMPStats{AckErrors: 5} }))
	if n, err := reg2.Gather(); err != nil || len(n) != 10 {
		t.Errorf("STOMP over a plain STOMPStats: %d families, %v; want 10", len(n), err)
	}
	if len(got) < 20 {
		t.Errorf("only %d counters gathered", len(got))
	}
	st.Connects = 2
	m.Delivered.Add(4)
	got = gather()
	if got["msgaudit_stomp_connects_total"] != 2 || got["msgaudit_receiver_delivered_total"] != 4 {
		t.Errorf("second scrape: connects %v, delivered %v; want 2 and 4 (the snapshots are read at scrape time)",
			got["msgaudit_stomp_connects_total"], got["msgaudit_receiver_delivered_total"])
	}
}
