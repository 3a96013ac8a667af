package promexport

import (
	"github.com/prometheus/client_golang/prometheus"

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
	labels := prometheus.Labels{"transport": transport}
	c := &collector{snapshot: snapshot}
	add := func(name, help string, read func(receiver.Snapshot) uint64) {
		c.counters = append(c.counters, counterDesc{
			desc: prometheus.NewDesc("msgaudit_receiver_"+name, help, nil, labels), read: read})
	}
	add("delivered_total", "Deliveries handed to the receiver.", func(s receiver.Snapshot) uint64 { return s.Delivered })
	add("redelivered_total", "Deliveries carrying the broker's redelivered flag.", func(s receiver.Snapshot) uint64 { return s.Redelivered })
	add("processed_total", "Handler successes acknowledged as new work.", func(s receiver.Snapshot) uint64 { return s.Processed })
	add("retries_total", "Deliveries handed back for a retry.", func(s receiver.Snapshot) uint64 { return s.Retries })
	add("dead_lettered_total", "Deliveries dead-lettered.", func(s receiver.Snapshot) uint64 { return s.DeadLettered })
	add("handler_errors_total", "Handler errors, panics included.", func(s receiver.Snapshot) uint64 { return s.HandlerErrors })
	add("panics_total", "Recovered handler panics.", func(s receiver.Snapshot) uint64 { return s.Panics })
	add("reconnects_total", "Transport reconnects.", func(s receiver.Snapshot) uint64 { return s.Reconnects })
	add("missing_keys_total", "Deliveries without a usable idempotency key.", func(s receiver.Snapshot) uint64 { return s.MissingKeys })
	add("too_old_fail_open_total", "Ids below the audit window treated as new without a durable store.", func(s receiver.Snapshot) uint64 { return s.TooOldFailOpen })
	add("audit_bypass_total", "Keys the audit could not parse, checked by the store only.", func(s receiver.Snapshot) uint64 { return s.AuditBypass })
	add("store_errors_total", "Failed idempotency store calls.", func(s receiver.Snapshot) uint64 { return s.StoreErrors })
	add("settle_errors_total", "Failed settlements (confirm errors).", func(s receiver.Snapshot) uint64 { return s.SettleErrors })
	add("forgotten_total", "Audit bits rolled back for deliveries that come back unrun.", func(s receiver.Snapshot) uint64 { return s.Forgotten })
	auditFrom := len(c.counters)
	add("audit_evictions_total", "Producers evicted from the connection audit to make room.", func(s receiver.Snapshot) uint64 { return s.Audit.Evictions })
	add("audit_recent_evictions_total", "Producers evicted while still active within their window (producer churn: raise MaxProducers or investigate a producer-key flood).", func(s receiver.Snapshot) uint64 { return s.Audit.RecentEvictions })
	add("audit_destination_evictions_total", "Destination audits evicted from the connection audit by MaxDestinations or MaxConsumers (a destination flood: their duplicates pass undetected).", func(s receiver.Snapshot) uint64 { return s.Audit.AuditEvictions })
	add("audit_malformed_total", "Ids rejected by the connection audit as malformed.", func(s receiver.Snapshot) uint64 { return s.Audit.Malformed })
	add("audit_too_long_total", "Ids rejected by the connection audit for exceeding MaxIDLength.", func(s receiver.Snapshot) uint64 { return s.Audit.TooLong })
	add("audit_too_old_total", "Ids below their producer's audit window.", func(s receiver.Snapshot) uint64 { return s.Audit.TooOld })
	for i := auditFrom; i < len(c.counters); i++ {
		c.counters[i].audit = true
	}
	gauge := func(name, help string, read func(receiver.Snapshot) int) {
		c.gauges = append(c.gauges, gaugeDesc{
			desc: prometheus.NewDesc("msgaudit_receiver_"+name, help, nil, labels), read: read})
	}
	gauge("audit_producers", "Producers tracked by the connection audit now.", func(s receiver.Snapshot) int { return s.Audit.Producers })
	gauge("audit_queues", "Queue audits of the connection audit now.", func(s receiver.Snapshot) int { return s.Audit.Queues })
	gauge("audit_topics", "Topic audits of the connection audit now.", func(s receiver.Snapshot) int { return s.Audit.Topics })
	c.dup = prometheus.NewDesc("msgaudit_receiver_duplicates_total", "Duplicates absorbed, by the tier that knew.",
		[]string{"reason"}, labels)
	c.lat = prometheus.NewDesc("msgaudit_receiver_store_latency_seconds", "Latency of idempotency store calls.", nil, labels)
	c.inFlight = prometheus.NewDesc("msgaudit_receiver_in_flight", "Deliveries inside the pipeline now (waiting for a handler, running it, or settling).", nil, labels)
	c.oldest = prometheus.NewDesc("msgaudit_receiver_oldest_in_flight_seconds", "How long the oldest delivery inside the pipeline has been there (0 with none): growing without bound is a stuck handler or settlement.", nil, labels)
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
