package promexport_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/acemq/msgaudit/promexport"
	"github.com/acemq/msgaudit/receiver"
)

// TestInFlightGauges: msgaudit_receiver_in_flight and
// msgaudit_receiver_oldest_in_flight_seconds show a stuck handler while it
// runs and go back to zero when it returns.
func TestInFlightGauges(t *testing.T) {
	m := new(receiver.Metrics)
	r, err := receiver.New(receiver.Config{MemoryOnly: true, Metrics: m})
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(promexport.Receiver(m.Snapshot, "orders"))

	release, entered := make(chan struct{}), make(chan time.Time, 1)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		r.Process(context.Background(), &receiver.Message{Key: "k", Destination: "/queue/orders"},
			func(context.Context, *receiver.Message) error {
				entered <- time.Now()
				<-release
				return nil
			})
	}()
	at := <-entered
	time.Sleep(20 * time.Millisecond)
	before := time.Now()
	g := metrics(t, reg)
	t.Logf("a stuck handler: msgaudit_receiver_in_flight %v, msgaudit_receiver_oldest_in_flight_seconds %.3f",
		g["msgaudit_receiver_in_flight"], g["msgaudit_receiver_oldest_in_flight_seconds"])
	if g["msgaudit_receiver_in_flight"] != 1 || g["msgaudit_receiver_oldest_in_flight_seconds"] < before.Sub(at).Seconds() {
		t.Errorf("a stuck handler: in_flight %v, oldest_in_flight_seconds %v; want 1 and at least %v",
			g["msgaudit_receiver_in_flight"], g["msgaudit_receiver_oldest_in_flight_seconds"], before.Sub(at).Seconds())
	}
	close(release)
	wg.Wait()
	g = metrics(t, reg)
	if v, ok := g["msgaudit_receiver_in_flight"]; !ok || v != 0 || g["msgaudit_receiver_oldest_in_flight_seconds"] != 0 {
		t.Errorf("after it returned: in_flight %v (exported %t), oldest_in_flight_seconds %v; want 0, 0", v, ok, g["msgaudit_receiver_oldest_in_flight_seconds"])
	}
}

// TestReceiverTransports: two Receiver collectors, one per transport,
// register in one pedantic registry; each series carries its collector's
// transport label and the value of its own Metrics. Without a connection
// audit the msgaudit_receiver_audit_* series are left out: 14 counters,
// 4 duplicate reasons and the store latency histogram per transport.
func TestReceiverTransports(t *testing.T) {
	t.Parallel()
	stomp, amqp := new(receiver.Metrics), new(receiver.Metrics)
	// What a receiver with a store counts for one message delivered twice
	// (receiver's TestMetricsSnapshot), and a transport's reconnects.
	stomp.Delivered.Add(2)
	stomp.Processed.Add(1)
	stomp.DuplicatesAudit.Add(1)
	stomp.StoreCalls.Add(2) // try-claim + confirm
	stomp.StoreBuckets[0].Add(2)
	stomp.Reconnects.Add(2)
	amqp.Delivered.Add(5)

	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(promexport.Receiver(stomp.Snapshot, "stomp"), promexport.Receiver(amqp.Snapshot, "amqp"))
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	// name{labels} → counter value or histogram sample count.
	got := map[string]float64{}
	for _, f := range families {
		for _, m := range f.GetMetric() {
			k := f.GetName() + "{"
			transport := ""
			for i, l := range m.GetLabel() {
				if i > 0 {
					k += ","
				}
				k += l.GetName() + "=" + l.GetValue()
				if l.GetName() == "transport" {
					transport = l.GetValue()
				}
			}
			k += "}"
			if transport != "stomp" && transport != "amqp" {
				t.Errorf("%s without a transport label", k)
			}
			switch f.GetType() {
			case dto.MetricType_COUNTER:
				got[k] = m.GetCounter().GetValue()
			case dto.MetricType_HISTOGRAM:
				got[k] = float64(m.GetHistogram().GetSampleCount())
			}
		}
	}
	for k, want := range map[string]float64{
		"msgaudit_receiver_delivered_total{transport=amqp}":                   5,
		"msgaudit_receiver_delivered_total{transport=stomp}":                  2,
		"msgaudit_receiver_processed_total{transport=stomp}":                  1,
		"msgaudit_receiver_duplicates_total{reason=audit,transport=stomp}":    1,
		"msgaudit_receiver_duplicates_total{reason=store,transport=stomp}":    0,
		"msgaudit_receiver_duplicates_total{reason=in-flight,transport=amqp}": 0,
		"msgaudit_receiver_reconnects_total{transport=stomp}":                 2,
		"msgaudit_receiver_store_latency_seconds{transport=stomp}":            2,
		"msgaudit_receiver_store_latency_seconds{transport=amqp}":             0,
		"msgaudit_receiver_too_old_fail_open_total{transport=stomp}":          0,
	} {
		if v, ok := got[k]; !ok || v != want {
			t.Errorf("%s = %v (present %v), want %v", k, v, ok, want)
		}
	}
	if len(got) != 2*(14+4+1) {
		t.Errorf("%d counter and histogram series, want %d", len(got), 2*(14+4+1))
	}
}
