package promexport_test

import (
	"context"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/acemq/msgaudit/promexport"
	"github.com/acemq/msgaudit/rabbitconsumer"
	"github.com/acemq/msgaudit/receiver"
	"github.com/acemq/msgaudit/stompconsumer"
)

// gather scrapes reg and sums every counter per metric name and label
// transport ("name{transport}").
func gather(t *testing.T, reg *prometheus.Registry) map[string]float64 {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, f := range families {
		for _, m := range f.GetMetric() {
			if m.GetCounter() == nil {
				continue
			}
			name := f.GetName()
			for _, l := range m.GetLabel() {
				if l.GetName() == "transport" {
					name += "{" + l.GetValue() + "}"
				}
			}
			got[name] += m.GetCounter().GetValue()
		}
	}
	return got
}

// TestTransport: the transport counters export as msgaudit_transport_*
// with the transport label, beside the pipeline's msgaudit_receiver_*,
// and are read at every scrape.
func TestTransport(t *testing.T) {
	t.Parallel()
	st := receiver.TransportStats{RetriesSent: 3, Oversized: 1}
	var m receiver.Metrics
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(promexport.Transport(func() receiver.TransportStats { return st }, "stomp"),
		promexport.Receiver(m.Snapshot, "stomp"))
	got := gather(t, reg)
	for name, want := range map[string]float64{
		"msgaudit_transport_retry_copies_total{stomp}": 3, "msgaudit_transport_oversized_total{stomp}": 1,
		"msgaudit_transport_connects_total{stomp}": 0, "msgaudit_receiver_delivered_total{stomp}": 0,
	} {
		v, ok := got[name]
		if !ok || v != want {
			t.Errorf("%s = %v (present %v), want %v", name, v, ok, want)
		}
	}
	if len(got) < 24 {
		t.Errorf("only %d counters gathered", len(got))
	}
	st.Connects = 2
	m.Delivered.Add(4)
	got = gather(t, reg)
	if got["msgaudit_transport_connects_total{stomp}"] != 2 || got["msgaudit_receiver_delivered_total{stomp}"] != 4 {
		t.Errorf("second scrape: connects %v, delivered %v; want 2 and 4 (the snapshots are read at scrape time)",
			got["msgaudit_transport_connects_total{stomp}"], got["msgaudit_receiver_delivered_total{stomp}"])
	}
}

// TestTransportBothConsumers: the Stats methods of both consumers plug
// into one collector type, and their collectors share a registry under
// their own transport labels.
func TestTransportBothConsumers(t *testing.T) {
	t.Parallel()
	sc, err := stompconsumer.New(stompconsumer.Config{Addresses: []string{"127.0.0.1:1"},
		Pipeline: receiver.Config{MemoryOnly: true},
		Subscriptions: []stompconsumer.Subscription{{Destination: "/queue/promexport",
			Handler: func(ctx context.Context, m *receiver.Message) error { return nil }}}})
	if err != nil {
		t.Fatal(err)
	}
	rc, err := rabbitconsumer.New(rabbitconsumer.Config{URL: "amqp://127.0.0.1:1/", Queue: "promexport",
		Pipeline: receiver.Config{MemoryOnly: true},
		Handler:  func(ctx context.Context, m *receiver.Message) error { return nil }})
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(promexport.Transport(sc.Stats, "stomp"), promexport.Transport(rc.Stats, "amqp"),
		promexport.Receiver(sc.Metrics().Snapshot, "stomp"), promexport.Receiver(rc.Metrics().Snapshot, "amqp"))
	got := gather(t, reg)
	for _, name := range []string{"msgaudit_transport_requeues_total{amqp}", "msgaudit_transport_acks_total{amqp}",
		"msgaudit_transport_retry_copies_total{stomp}", "msgaudit_transport_connects_total{amqp}",
		"msgaudit_transport_connects_total{stomp}"} {
		if v, ok := got[name]; !ok || v != 0 {
			t.Errorf("%s = %v (present %v), want 0", name, v, ok)
		}
	}
}
