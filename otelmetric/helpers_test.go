package otelmetric_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/acemq/msgaudit/connaudit"
	"github.com/acemq/msgaudit/receiver"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
)

// knownSnapshot has every field set, each to a value of its own, so that
// an instrument read from the wrong field shows.
func knownSnapshot() receiver.Snapshot {
	s := receiver.Snapshot{
		Delivered: 1, Redelivered: 2, Processed: 3,
		DuplicatesAudit: 4, DuplicatesStore: 5, DuplicatesInFlight: 6, DuplicatesOther: 7,
		Retries: 8, DeadLettered: 9, HandlerErrors: 10, Panics: 11, Reconnects: 12,
		MissingKeys: 13, TooOldFailOpen: 14, AuditBypass: 15,
		StoreErrors: 16, SettleErrors: 17, Forgotten: 18,
		StoreCalls: 78, StoreLatency: 1500 * time.Millisecond,
		StoreBuckets: []uint64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12},
		Audited:      true,
		Audit:        connaudit.Stats{AuditEvictions: 21, Queues: 26, Topics: 27},
		InFlight:     28, OldestInFlight: 2500 * time.Millisecond,
	}
	s.Audit.Evictions, s.Audit.RecentEvictions = 19, 20
	s.Audit.Malformed, s.Audit.TooLong, s.Audit.TooOld, s.Audit.Producers = 22, 23, 24, 25
	return s
}

// knownStats has every counter set, each to a value of its own.
func knownStats() receiver.TransportStats {
	return receiver.TransportStats{Connects: 1, Reconnects: 2, ConnectErrors: 3, Lost: 4, Acks: 5,
		Requeues: 6, RetriesSent: 7, LocalRetries: 8, DeadLetters: 9, DeadLetterErrors: 10,
		Oversized: 11, Dropped: 12, StaleAcks: 13, AckErrors: 14, Generation: 15}
}

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
