package otelmetric_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/acemq/msgaudit/idempotency"
	"github.com/acemq/msgaudit/otelmetric"
	"github.com/acemq/msgaudit/receiver"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
)

// Example registers a pipeline's counters and a store's backlog on a
// meter, processes a delivery and its redelivery, and collects. A program
// sets its exporter (OTLP, Prometheus) as the MeterProvider's reader; here
// a manual reader prints a few of the instruments.
func Example() {
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer func() { _ = mp.Shutdown(context.Background()) }()
	meter := mp.Meter("github.com/acemq/msgaudit/otelmetric")

	metrics := new(receiver.Metrics)
	r, err := receiver.New(receiver.Config{MemoryOnly: true, Metrics: metrics})
	if err != nil {
		log.Fatal(err)
	}
	reg, err := otelmetric.Receiver(meter, metrics.Snapshot, "amqp")
	if err != nil {
		log.Fatal(err)
	}
	defer func() { _ = reg.Unregister() }()
	backlog := func(context.Context) (idempotency.Backlog, error) { // a store's Backlog method
		return idempotency.Backlog{Held: 2, OldestHeld: 3 * time.Second}, nil
	}
	breg, err := otelmetric.Backlog(meter, backlog, "orders")
	if err != nil {
		log.Fatal(err)
	}
	defer func() { _ = breg.Unregister() }()

	for _, redelivered := range []bool{false, true} {
		m := &receiver.Message{Key: "order-1", Destination: "orders", Redelivered: redelivered}
		r.Process(context.Background(), m, func(context.Context, *receiver.Message) error { return nil })
	}

	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		log.Fatal(err)
	}
	for _, m := range rm.ScopeMetrics[0].Metrics {
		switch d := m.Data.(type) {
		case metricdata.Sum[int64]:
			for _, p := range d.DataPoints {
				if r, ok := p.Attributes.Value("reason"); ok && p.Value > 0 {
					fmt.Printf("%s{reason=%s} %d\n", m.Name, r.String(), p.Value)
				} else if m.Name == "msgaudit_receiver_delivered_total" || m.Name == "msgaudit_receiver_processed_total" {
					fmt.Printf("%s %d\n", m.Name, p.Value)
				}
			}
		case metricdata.Gauge[float64]:
			if m.Name == "msgaudit_backlog_oldest_held_seconds" {
				fmt.Printf("%s %g %s\n", m.Name, d.DataPoints[0].Value, m.Unit)
			}
		}
	}
	// Output:
	// msgaudit_receiver_delivered_total 2
	// msgaudit_receiver_processed_total 1
	// msgaudit_receiver_duplicates_total{reason=audit} 1
	// msgaudit_backlog_oldest_held_seconds 3 s
}
