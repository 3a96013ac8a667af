package promexport

import (
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
	c := &collector{snapshot: snapshot}
	add := func(m metricnames.Metric, read func(receiver.Snapshot) uint64) {
		c.counters = append(c.counters, counterDesc{desc: newDesc(m, transport), read: read})
	}
	add(metricnames.ReceiverDelivered, func(s receiver.Snapshot) uint64 { return s.Delivered })
	add(metricnames.ReceiverRedelivered, func(s receiver.Snapshot) uint64 { return s.Redelivered })
	add(metricnames.ReceiverProcessed, func(s receiver.Snapshot) uint64 { return s.Processed })
	add(metricnames.ReceiverRetries, func(s receiver.Snapshot) uint64 { return s.Retries })
	add(metricnames.ReceiverDeadLettered, func(s receiver.Snapshot) uint64 { return s.DeadLettered })
	add(metricnames.ReceiverHandlerErrors, func(s receiver.Snapshot) uint64 { return s.HandlerErrors })
	add(metricnames.ReceiverPanics, func(s receiver.Snapshot) uint64 { return s.Panics })
	add(metricnames.ReceiverReconnects, func(s receiver.Snapshot) uint64 { return s.Reconnects })
	add(metricnames.ReceiverMissingKeys, func(s receiver.Snapshot) uint64 { return s.MissingKeys })
	add(metricnames.ReceiverTooOldFailOpen, func(s receiver.Snapshot) uint64 { return s.TooOldFailOpen })
	add(metricnames.ReceiverAuditBypass, func(s receiver.Snapshot) uint64 { return s.AuditBypass })
	add(metricnames.ReceiverStoreErrors, func(s receiver.Snapshot) uint64 { return s.StoreErrors })
	add(metricnames.ReceiverSettleErrors, func(s receiver.Snapshot) uint64 { return s.SettleErrors })
	add(metricnames.ReceiverForgotten, func(s receiver.Snapshot) uint64 { return s.Forgotten })
	auditFrom := len(c.counters)
	add(metricnames.ReceiverAuditEvictions, func(s receiver.Snapshot) uint64 { return s.Audit.Evictions })
	add(metricnames.ReceiverAuditRecentEvictions, func(s receiver.Snapshot) uint64 { return s.Audit.RecentEvictions })
	add(metricnames.ReceiverAuditDestinationEvictions, func(s receiver.Snapshot) uint64 { return s.Audit.AuditEvictions })
	add(metricnames.ReceiverAuditMalformed, func(s receiver.Snapshot) uint64 { return s.Audit.Malformed })
	add(metricnames.ReceiverAuditTooLong, func(s receiver.Snapshot) uint64 { return s.Audit.TooLong })
	add(metricnames.ReceiverAuditTooOld, func(s receiver.Snapshot) uint64 { return s.Audit.TooOld })
	for i := auditFrom; i < len(c.counters); i++ {
		c.counters[i].audit = true
	}
	gauge := func(m metricnames.Metric, read func(receiver.Snapshot) int) {
		c.gauges = append(c.gauges, gaugeDesc{desc: newDesc(m, transport), read: read})
	}
	gauge(metricnames.ReceiverAuditProducers, func(s receiver.Snapshot) int { return s.Audit.Producers })
	gauge(metricnames.ReceiverAuditQueues, func(s receiver.Snapshot) int { return s.Audit.Queues })
	gauge(metricnames.ReceiverAuditTopics, func(s receiver.Snapshot) int { return s.Audit.Topics })
	c.dup = newDesc(metricnames.ReceiverDuplicates, transport)
	c.lat = newDesc(metricnames.ReceiverStoreLatency, transport)
	c.inFlight = newDesc(metricnames.ReceiverInFlight, transport)
	c.oldest = newDesc(metricnames.ReceiverOldestInFlight, transport)
	return c
}

type counterDesc struct {
	desc  *prometheus.Desc
	read  func(receiver.Snapshot) uint64
	audit bool // exported only when an audit reports to the Metrics
}

type gaugeDesc struct {
	desc *prometheus.Desc
	read func(receiver.Snapshot) int
}

type collector struct {
	snapshot func() receiver.Snapshot
	counters []counterDesc
	gauges   []gaugeDesc
	dup, lat *prometheus.Desc
	inFlight *prometheus.Desc
	oldest   *prometheus.Desc
}

func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range c.counters {
		ch <- d.desc
	}
	for _, d := range c.gauges {
		ch <- d.desc
	}
	ch <- c.dup
	ch <- c.lat
	ch <- c.inFlight
	ch <- c.oldest
}

func (c *collector) Collect(ch chan<- prometheus.Metric) {
	s := c.snapshot()
	audited := s.Audited
	for _, d := range c.counters {
		if !d.audit || audited {
			ch <- prometheus.MustNewConstMetric(d.desc, prometheus.CounterValue, float64(d.read(s)))
		}
	}
	if audited {
		for _, d := range c.gauges {
			ch <- prometheus.MustNewConstMetric(d.desc, prometheus.GaugeValue, float64(d.read(s)))
		}
	}
	ch <- prometheus.MustNewConstMetric(c.inFlight, prometheus.GaugeValue, float64(s.InFlight))
	ch <- prometheus.MustNewConstMetric(c.oldest, prometheus.GaugeValue, s.OldestInFlight.Seconds())
	for _, r := range []struct {
		reason string
		v      uint64
	}{{"audit", s.DuplicatesAudit}, {"store", s.DuplicatesStore}, {"in-flight", s.DuplicatesInFlight}, {"other", s.DuplicatesOther}} {
		ch <- prometheus.MustNewConstMetric(c.dup, prometheus.CounterValue, float64(r.v), r.reason)
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

// newDesc returns the Desc of m: its first label is constant, set to
// value; the others vary.
func newDesc(m metricnames.Metric, value string) *prometheus.Desc {
	return prometheus.NewDesc(m.Name, m.Help, m.Labels[1:], prometheus.Labels{m.Labels[0]: value})
}
