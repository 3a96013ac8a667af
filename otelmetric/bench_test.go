package otelmetric_test

import (
	"context"
	"testing"

	"github.com/acemq/msgaudit/internal/testkit/metricfixture"
	"github.com/acemq/msgaudit/otelmetric"
	"github.com/acemq/msgaudit/promexport"
	"github.com/prometheus/client_golang/prometheus"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
)

// BenchmarkCollect is the cost of one collection of a pipeline's and a
// transport's metrics: exporter=otel through the SDK's manual reader,
// exporter=prometheus a promexport registry's Gather, for comparison.
func BenchmarkCollect(b *testing.B) {
	b.Run("exporter=otel", func(b *testing.B) {
		r := sdkmetric.NewManualReader()
		mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(r))
		defer func() { _ = mp.Shutdown(context.Background()) }()
		meter := mp.Meter("bench")
		if _, err := otelmetric.Receiver(meter, metricfixture.Snapshot, "stomp"); err != nil {
			b.Fatal(err)
		}
		if _, err := otelmetric.Transport(meter, metricfixture.Stats, "stomp"); err != nil {
			b.Fatal(err)
		}
		var rm metricdata.ResourceMetrics
		b.ReportAllocs()
		for b.Loop() {
			if err := r.Collect(context.Background(), &rm); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("exporter=prometheus", func(b *testing.B) {
		reg := prometheus.NewRegistry()
		reg.MustRegister(promexport.Receiver(metricfixture.Snapshot, "stomp"), promexport.Transport(metricfixture.Stats, "stomp"))
		b.ReportAllocs()
		for b.Loop() {
			if _, err := reg.Gather(); err != nil {
				b.Fatal(err)
			}
		}
	})
}
