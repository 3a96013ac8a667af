package promexport_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/acemq/msgaudit/promexport"
	"github.com/acemq/msgaudit/receiver"
)

// gauges scrapes reg and returns every gauge's value by metric name.
func gauges(t *testing.T, reg *prometheus.Registry) map[string]float64 {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, f := range families {
		for _, m := range f.GetMetric() {
			if g := m.GetGauge(); g != nil {
				got[f.GetName()] = g.GetValue()
			}
		}
	}
	return got
}

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
	g := gauges(t, reg)
	t.Logf("a stuck handler: msgaudit_receiver_in_flight %v, msgaudit_receiver_oldest_in_flight_seconds %.3f",
		g["msgaudit_receiver_in_flight"], g["msgaudit_receiver_oldest_in_flight_seconds"])
	if g["msgaudit_receiver_in_flight"] != 1 || g["msgaudit_receiver_oldest_in_flight_seconds"] < before.Sub(at).Seconds() {
		t.Errorf("a stuck handler: in_flight %v, oldest_in_flight_seconds %v; want 1 and at least %v",
			g["msgaudit_receiver_in_flight"], g["msgaudit_receiver_oldest_in_flight_seconds"], before.Sub(at).Seconds())
	}
	close(release)
	wg.Wait()
	g = gauges(t, reg)
	if v, ok := g["msgaudit_receiver_in_flight"]; !ok || v != 0 || g["msgaudit_receiver_oldest_in_flight_seconds"] != 0 {
		t.Errorf("after it returned: in_flight %v (exported %t), oldest_in_flight_seconds %v; want 0, 0", v, ok, g["msgaudit_receiver_oldest_in_flight_seconds"])
	}
}
