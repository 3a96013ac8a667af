package promexport

import (
	"slices"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/acemq/msgaudit/internal/metricnames"
	"github.com/acemq/msgaudit/internal/storelat"
	"github.com/acemq/msgaudit/receiver"
)

// Receiver returns a prometheus.Collector exporting the receiver counters
// snapshot returns (usually the Snapshot method of a *receiver.Metrics,
// read at every scrape) under the metric names msgaudit_receiver_*, with the constant label transport (e.g.
// "stomp", "amqp", "model"). Several collectors with different transport
// values may be registered in one registry. The connection audit's
// counters (msgaudit_receiver_audit_*: evictions, recent evictions,
// destination evictions, malformed, too long and too old ids as counters;
// producers, queue and
// topic audits as gauges) are read at scrape time, exported only once
// a snapshot says Audited.
func Receiver(snapshot func() receiver.Snapshot, transport string) prometheus.Collector {
	return &collector{
		snapshot: snapshot,
		series: slices.Concat(counters(metricnames.ReceiverCounters, transport),
			gauges(metricnames.ReceiverGauges, transport), secondsGauges(metricnames.ReceiverSecondsGauges, transport)),
		audit: slices.Concat(counters(metricnames.ReceiverAuditCounters, transport),
			gauges(metricnames.ReceiverAuditGauges, transport)),
		dup: newDesc(metricnames.ReceiverDuplicates, transport),
		lat: newDesc(metricnames.ReceiverStoreLatency, transport),
	}
}

type collector struct {
	snapshot func() receiver.Snapshot
	series   []series[receiver.Snapshot]
	audit    []series[receiver.Snapshot] // exported only when an audit reports to the Metrics
	dup, lat *prometheus.Desc
}

func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	describe(ch, c.series)
	describe(ch, c.audit)
	ch <- c.dup
	ch <- c.lat
}

func (c *collector) Collect(ch chan<- prometheus.Metric) {
	s := c.snapshot()
	collect(ch, c.series, s)
	if s.Audited {
		collect(ch, c.audit, s)
	}
	for _, r := range metricnames.ReceiverDuplicateReasons {
		ch <- prometheus.MustNewConstMetric(c.dup, prometheus.CounterValue, float64(r.Read(s)), r.Value)
	}
	bounds := storelat.Bounds
	buckets := make(map[float64]uint64, len(bounds))
	var cum uint64
	for i, b := range bounds {
		if i < len(s.StoreBuckets) {
			cum += s.StoreBuckets[i]
		}
		buckets[b.Seconds()] = cum
	}
	ch <- prometheus.MustNewConstHistogram(c.lat, s.StoreCalls, s.StoreLatency.Seconds(), buckets)
}
