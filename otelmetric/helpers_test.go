package otelmetric_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
)

// newReader returns a manual reader and a meter whose instruments it
// collects.
func newReader(t *testing.T) (*sdkmetric.ManualReader, *sdkmetric.MeterProvider) {
	t.Helper()
	r := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(r))
	t.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
	return r, mp
}

// instrument is what one collection says of an instrument.
type instrument struct {
	kind        string // "counter" (a monotonic sum) or "gauge"
	description string
	unit        string
	points      map[string]float64 // by attributes, "k=v,k=v"
}

// collect collects r and returns every instrument by name.
func collect(t *testing.T, r *sdkmetric.ManualReader) map[string]instrument {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := r.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	got := map[string]instrument{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			in := instrument{description: m.Description, unit: m.Unit, points: map[string]float64{}}
			switch d := m.Data.(type) {
			case metricdata.Sum[int64]:
				in.kind = kindOf(d.IsMonotonic)
				for _, p := range d.DataPoints {
					in.points[attrs(p.Attributes)] = float64(p.Value)
				}
			case metricdata.Sum[float64]:
				in.kind = kindOf(d.IsMonotonic)
				for _, p := range d.DataPoints {
					in.points[attrs(p.Attributes)] = p.Value
				}
			case metricdata.Gauge[int64]:
				in.kind = "gauge"
				for _, p := range d.DataPoints {
					in.points[attrs(p.Attributes)] = float64(p.Value)
				}
			case metricdata.Gauge[float64]:
				in.kind = "gauge"
				for _, p := range d.DataPoints {
					in.points[attrs(p.Attributes)] = p.Value
				}
			default:
				t.Fatalf("%s: unexpected data %T", m.Name, m.Data)
			}
			if len(in.points) > 0 {
				got[m.Name] = in
			}
		}
	}
	return got
}

func kindOf(monotonic bool) string {
	if monotonic {
		return "counter"
	}
	return "up-down counter"
}

func attrs(s attribute.Set) string {
	var kv []string
	for _, a := range s.ToSlice() {
		kv = append(kv, fmt.Sprintf("%s=%s", a.Key, a.Value.String()))
	}
	slices.Sort(kv)
	return strings.Join(kv, ",")
}
