package metricnames_test

import (
	"slices"
	"testing"
	"time"

	"github.com/acemq/msgaudit/idempotency"
	"github.com/acemq/msgaudit/internal/metricnames"
	"github.com/acemq/msgaudit/internal/testkit/metricfixture"
)

// read is one entry of a read table: its metric and what it reads from
// the fixture.
type read struct {
	m     metricnames.Metric
	value float64
}

func counters[T any](t T, table []metricnames.CounterOf[T]) []read {
	var r []read
	for _, c := range table {
		r = append(r, read{c.Metric, float64(c.Read(t))})
	}
	return r
}

func gauges[T any](t T, table []metricnames.GaugeOf[T]) []read {
	var r []read
	for _, g := range table {
		r = append(r, read{g.Metric, float64(g.Read(t))})
	}
	return r
}

func seconds[T any](t T, table []metricnames.SecondsGaugeOf[T]) []read {
	var r []read
	for _, g := range table {
		r = append(r, read{g.Metric, g.Read(t).Seconds()})
	}
	return r
}

// TestReadTables: the read tables hold every metric of the receiver,
// transport and backlog tables once, but for the ones an exporter reads
// its own way (the duplicates by reason, the store latency histogram,
// the backlog's failed samples); a counter table holds counters, a gauge
// table gauges, a seconds table metrics in s; and each metric reads a
// field of its own: the fixtures set every field to a value of its own,
// so two metrics reading the same field show as one value twice.
func TestReadTables(t *testing.T) {
	snap, stats := metricfixture.Snapshot(), metricfixture.Stats()
	backlog := idempotency.Backlog{Held: 1, OldestHeld: 2 * time.Second, Rows: 3, OldestRow: 4 * time.Second}
	cases := []struct {
		name    string
		table   []metricnames.Metric
		special []metricnames.Metric
		reads   [][]read // counters, gauges, seconds gauges
	}{
		{"receiver", metricnames.Receiver,
			[]metricnames.Metric{metricnames.ReceiverDuplicates, metricnames.ReceiverStoreLatency},
			[][]read{
				slices.Concat(counters(snap, metricnames.ReceiverCounters), counters(snap, metricnames.ReceiverAuditCounters)),
				slices.Concat(gauges(snap, metricnames.ReceiverAuditGauges), gauges(snap, metricnames.ReceiverGauges)),
				seconds(snap, metricnames.ReceiverSecondsGauges),
			}},
		{"transport", metricnames.Transport, nil,
			[][]read{counters(stats, metricnames.TransportCounters), nil, nil}},
		{"backlog", metricnames.Backlog, []metricnames.Metric{metricnames.BacklogSampleErrors},
			[][]read{nil, gauges(backlog, metricnames.BacklogGauges), seconds(backlog, metricnames.BacklogSecondsGauges)}},
	}
	for _, c := range cases {
		want := map[string]int{}
		for _, m := range c.table {
			want[m.Name] = 1
		}
		for _, m := range c.special {
			want[m.Name]--
		}
		values := map[float64]string{}
		if c.name == "receiver" {
			for _, r := range metricnames.ReceiverDuplicateReasons {
				values[float64(r.Read(snap))] = metricnames.ReceiverDuplicates.Name + "{reason=" + r.Value + "}"
			}
		}
		for i, reads := range c.reads {
			for _, r := range reads {
				want[r.m.Name]--
				switch {
				case i == 0 && r.m.Kind != metricnames.Counter,
					i > 0 && r.m.Kind != metricnames.Gauge,
					i == 2 && r.m.Unit != "s":
					t.Errorf("%s: a %v in unit %q is in the wrong read table", r.m.Name, r.m.Kind, r.m.Unit)
				}
				if other, ok := values[r.value]; ok || r.value == 0 {
					t.Errorf("%s reads %v, as %q does: the same field twice, or one the fixture leaves unset", r.m.Name, r.value, other)
				}
				values[r.value] = r.m.Name
			}
		}
		for name, n := range want {
			if n != 0 {
				t.Errorf("%s: %s is read %d times, not once", c.name, name, 1-n)
			}
		}
	}
}
