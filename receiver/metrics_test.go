package receiver_test

import (
	"testing"

	"github.com/acemq/msgaudit/promexport"
	"github.com/acemq/msgaudit/receiver"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// gathered returns name{labels} → value (counters) or sample count
// (histograms) from reg.
func gathered(t *testing.T, reg *prometheus.Registry) map[string]float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			k := mf.GetName() + "{"
			for i, l := range m.GetLabel() {
				if i > 0 {
					k += ","
				}
				k += l.GetName() + "=" + l.GetValue()
			}
			k += "}"
			switch mf.GetType() {
			case dto.MetricType_COUNTER:
				out[k] = m.GetCounter().GetValue()
			case dto.MetricType_HISTOGRAM:
				out[k] = float64(m.GetHistogram().GetSampleCount())
			}
		}
	}
	return out
}

func TestCollector(t *testing.T) {
	t.Parallel()
	stomp, amqp := new(receiver.Metrics), new(receiver.Metrics)
	g := newRig(t, true, func(c *receiver.Config) { c.Metrics = stomp })
	g.r.Process(bg, msg("ID:p:1"), okHandler)
	g.r.Process(bg, msg("ID:p:1"), okHandler)
	stomp.Reconnects.Add(2)
	amqp.Delivered.Add(5)

	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(promexport.Receiver(stomp.Snapshot, "stomp"), promexport.Receiver(amqp.Snapshot, "amqp"))
	got := gathered(t, reg)
	for k, want := range map[string]float64{
		"msgaudit_receiver_delivered_total{transport=amqp}":                   5,
		"msgaudit_receiver_delivered_total{transport=stomp}":                  2,
		"msgaudit_receiver_processed_total{transport=stomp}":                  1,
		"msgaudit_receiver_duplicates_total{reason=audit,transport=stomp}":    1,
		"msgaudit_receiver_duplicates_total{reason=store,transport=stomp}":    0,
		"msgaudit_receiver_duplicates_total{reason=in-flight,transport=amqp}": 0,
		"msgaudit_receiver_reconnects_total{transport=stomp}":                 2,
		"msgaudit_receiver_store_latency_seconds{transport=stomp}":            2, // try-claim + confirm
		"msgaudit_receiver_store_latency_seconds{transport=amqp}":             0,
		"msgaudit_receiver_too_old_fail_open_total{transport=stomp}":          0,
	} {
		if v, ok := got[k]; !ok || v != want {
			t.Errorf("%s = %v (present %v), want %v", k, v, ok, want)
		}
	}
	if len(got) != 2*(14+4+1) {
		t.Errorf("%d series, want %d", len(got), 2*(14+4+1))
	}
	var nilMetrics *receiver.Metrics
	if s := nilMetrics.Snapshot(); s.Delivered != 0 {
		t.Fatal("nil metrics")
	}
}
