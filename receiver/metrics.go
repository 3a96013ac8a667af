package receiver

import (
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/acemq/msgaudit/connaudit"
	"github.com/prometheus/client_golang/prometheus"
)

// storeBuckets are the upper bounds of the store latency histogram.
var storeBuckets = [...]time.Duration{
	100 * time.Microsecond, 250 * time.Microsecond, 500 * time.Microsecond,
	time.Millisecond, 2500 * time.Microsecond, 5 * time.Millisecond,
	10 * time.Millisecond, 25 * time.Millisecond, 50 * time.Millisecond,
	100 * time.Millisecond, 250 * time.Millisecond, time.Second,
}

// Metrics are the counters of one receiver (and of the transport that
// drives it: transports add Reconnects). Every field is an atomic counter,
// safe for concurrent use; a nil *Metrics counts nothing. One Metrics may be
// shared by several receivers of the same transport.
type Metrics struct {
	// Delivered counts Process calls.
	Delivered atomic.Uint64
	// Redelivered counts deliveries carrying the broker's redelivered flag.
	Redelivered atomic.Uint64
	// Processed counts handler successes whose effect was confirmed (acked
	// as new work).
	Processed atomic.Uint64
	// DuplicatesAudit counts duplicates absorbed by the in-memory tier.
	DuplicatesAudit atomic.Uint64
	// DuplicatesStore counts duplicates absorbed by the idempotency store.
	DuplicatesStore atomic.Uint64
	// DuplicatesInFlight counts deliveries whose original was in flight
	// (here or, through the store, elsewhere): waited for, or requeued.
	DuplicatesInFlight atomic.Uint64
	// DuplicatesOther counts duplicates rejected by other selectors.
	DuplicatesOther atomic.Uint64
	// Retries counts Requeue results.
	Retries atomic.Uint64
	// DeadLettered counts DeadLetter results.
	DeadLettered atomic.Uint64
	// HandlerErrors counts handler errors (panics included).
	HandlerErrors atomic.Uint64
	// Panics counts recovered handler panics.
	Panics atomic.Uint64
	// Reconnects counts transport reconnects (incremented by transports).
	Reconnects atomic.Uint64
	// MissingKeys counts deliveries without a usable key.
	MissingKeys atomic.Uint64
	// TooOldFailOpen counts ids below the audit window treated as new
	// because no durable tier follows.
	TooOldFailOpen atomic.Uint64
	// AuditBypass counts keys the audit could not parse, checked by the
	// durable tier only.
	AuditBypass atomic.Uint64
	// StoreErrors counts failed store calls.
	StoreErrors atomic.Uint64
	// SettleErrors counts failed settlements (a confirm that failed).
	SettleErrors atomic.Uint64
	// Forgotten counts audit bits rolled back by Forget.
	Forgotten atomic.Uint64
	// StoreCalls and StoreNanos are the count and total latency of store
	// calls; StoreBuckets[i] counts calls no slower than the i-th bound of
	// StoreBucketBounds.
	StoreCalls   atomic.Uint64
	StoreNanos   atomic.Uint64
	StoreBuckets [len(storeBuckets)]atomic.Uint64

	// auditMu serialises addAudit; audits is the list of connection
	// audits whose counters Snapshot reads (copy on write).
	auditMu sync.Mutex
	audits  atomic.Pointer[[]AuditStatsReporter]
}

// addAudit makes m's snapshots report r's counters (once, however often
// it is added).
func (m *Metrics) addAudit(r AuditStatsReporter) {
	if m == nil || r == nil {
		return
	}
	m.auditMu.Lock()
	defer m.auditMu.Unlock()
	var cur []AuditStatsReporter
	if p := m.audits.Load(); p != nil {
		cur = *p
	}
	if slices.Contains(cur, r) {
		return
	}
	next := append(slices.Clip(cur), r)
	m.audits.Store(&next)
}

// audited reports whether an audit reports its counters to m.
func (m *Metrics) audited() bool {
	if m == nil {
		return false
	}
	p := m.audits.Load()
	return p != nil && len(*p) > 0
}

// auditStats sums the counters of the reporting audits.
func (m *Metrics) auditStats() connaudit.Stats {
	var st connaudit.Stats
	p := m.audits.Load()
	if p == nil {
		return st
	}
	for _, r := range *p {
		s := r.AuditStats()
		st.Checks += s.Checks
		st.New += s.New
		st.Duplicates += s.Duplicates
		st.TooOld += s.TooOld
		st.Malformed += s.Malformed
		st.TooLong += s.TooLong
		st.Evictions += s.Evictions
		st.RecentEvictions += s.RecentEvictions
		st.Rollbacks += s.Rollbacks
		st.Producers += s.Producers
		st.NoDestination += s.NoDestination
		st.NoID += s.NoID
		st.Disabled += s.Disabled
		st.Queues += s.Queues
		st.Topics += s.Topics
		st.AuditEvictions += s.AuditEvictions
	}
	return st
}

// StoreBucketBounds returns the upper bounds of the store latency buckets.
func StoreBucketBounds() []time.Duration {
	b := storeBuckets
	return b[:]
}

func (m *Metrics) inc(c *atomic.Uint64) {
	if m != nil {
		c.Add(1)
	}
}

func (m *Metrics) observeStore(d time.Duration) {
	if m == nil {
		return
	}
	m.StoreCalls.Add(1)
	m.StoreNanos.Add(uint64(d))
	for i, b := range storeBuckets {
		if d <= b {
			m.StoreBuckets[i].Add(1)
			break
		}
	}
}

func (m *Metrics) duplicate(reason string) {
	if m == nil {
		return
	}
	switch reason {
	case "audit":
		m.DuplicatesAudit.Add(1)
	case "store":
		m.DuplicatesStore.Add(1)
	case "in-flight":
		m.DuplicatesInFlight.Add(1)
	default:
		m.DuplicatesOther.Add(1)
	}
}

// Snapshot is a point-in-time copy of Metrics.
type Snapshot struct {
	Delivered, Redelivered, Processed                                     uint64
	DuplicatesAudit, DuplicatesStore, DuplicatesInFlight, DuplicatesOther uint64
	Retries, DeadLettered, HandlerErrors, Panics, Reconnects              uint64
	MissingKeys, TooOldFailOpen, AuditBypass                              uint64
	StoreErrors, SettleErrors, Forgotten                                  uint64
	StoreCalls                                                            uint64
	StoreLatency                                                          time.Duration // total
	StoreBuckets                                                          []uint64      // per bound of StoreBucketBounds, not cumulative
	// Audit sums the counters of the connection audits that report to
	// these Metrics (see AuditStatsReporter, ConnAuditMetrics), read when
	// the snapshot is taken; zero without one. Audit.RecentEvictions
	// growing means producers still active were evicted: MaxProducers is
	// too small or a producer-key flood is under way.
	Audit connaudit.Stats
}

// Duplicates returns the total of the duplicates counters.
func (s Snapshot) Duplicates() uint64 {
	return s.DuplicatesAudit + s.DuplicatesStore + s.DuplicatesInFlight + s.DuplicatesOther
}

// MeanStoreLatency returns the mean latency of a store call (0 without calls).
func (s Snapshot) MeanStoreLatency() time.Duration {
	if s.StoreCalls == 0 {
		return 0
	}
	return s.StoreLatency / time.Duration(s.StoreCalls)
}

// Snapshot copies the counters and reads those of the reporting connection
// audits (a walk over their destination audits). Each counter is read
// atomically; the set is not one atomic cut.
func (m *Metrics) Snapshot() Snapshot {
	if m == nil {
		return Snapshot{}
	}
	s := Snapshot{
		Delivered: m.Delivered.Load(), Redelivered: m.Redelivered.Load(), Processed: m.Processed.Load(),
		DuplicatesAudit: m.DuplicatesAudit.Load(), DuplicatesStore: m.DuplicatesStore.Load(),
		DuplicatesInFlight: m.DuplicatesInFlight.Load(), DuplicatesOther: m.DuplicatesOther.Load(),
		Retries: m.Retries.Load(), DeadLettered: m.DeadLettered.Load(), HandlerErrors: m.HandlerErrors.Load(),
		Panics: m.Panics.Load(), Reconnects: m.Reconnects.Load(), MissingKeys: m.MissingKeys.Load(),
		TooOldFailOpen: m.TooOldFailOpen.Load(), AuditBypass: m.AuditBypass.Load(),
		StoreErrors: m.StoreErrors.Load(), SettleErrors: m.SettleErrors.Load(), Forgotten: m.Forgotten.Load(),
		StoreCalls: m.StoreCalls.Load(), StoreLatency: time.Duration(m.StoreNanos.Load()),
		StoreBuckets: make([]uint64, len(storeBuckets)),
	}
	for i := range m.StoreBuckets {
		s.StoreBuckets[i] = m.StoreBuckets[i].Load()
	}
	s.Audit = m.auditStats()
	return s
}

// Collector returns a prometheus.Collector exporting m under the metric
// names msgaudit_receiver_*, with the constant label transport (e.g.
// "stomp", "amqp", "model"). Several collectors with different transport
// values may be registered in one registry. The connection audit's
// counters (msgaudit_receiver_audit_*: evictions, recent evictions,
// destination evictions, malformed, too long and too old ids as counters; producers, queue and
// topic audits as gauges) are read at scrape time, zero when no audit
// reports to m: they are exported only once one does.
func (m *Metrics) Collector(transport string) prometheus.Collector {
	labels := prometheus.Labels{"transport": transport}
	c := &collector{m: m}
	add := func(name, help string, read func(Snapshot) uint64) {
		c.counters = append(c.counters, counterDesc{
			desc: prometheus.NewDesc("msgaudit_receiver_"+name, help, nil, labels), read: read})
	}
	add("delivered_total", "Deliveries handed to the receiver.", func(s Snapshot) uint64 { return s.Delivered })
	add("redelivered_total", "Deliveries carrying the broker's redelivered flag.", func(s Snapshot) uint64 { return s.Redelivered })
	add("processed_total", "Handler successes acknowledged as new work.", func(s Snapshot) uint64 { return s.Processed })
	add("retries_total", "Deliveries handed back for a retry.", func(s Snapshot) uint64 { return s.Retries })
	add("dead_lettered_total", "Deliveries dead-lettered.", func(s Snapshot) uint64 { return s.DeadLettered })
	add("handler_errors_total", "Handler errors, panics included.", func(s Snapshot) uint64 { return s.HandlerErrors })
	add("panics_total", "Recovered handler panics.", func(s Snapshot) uint64 { return s.Panics })
	add("reconnects_total", "Transport reconnects.", func(s Snapshot) uint64 { return s.Reconnects })
	add("missing_keys_total", "Deliveries without a usable idempotency key.", func(s Snapshot) uint64 { return s.MissingKeys })
	add("too_old_fail_open_total", "Ids below the audit window treated as new without a durable store.", func(s Snapshot) uint64 { return s.TooOldFailOpen })
	add("audit_bypass_total", "Keys the audit could not parse, checked by the store only.", func(s Snapshot) uint64 { return s.AuditBypass })
	add("store_errors_total", "Failed idempotency store calls.", func(s Snapshot) uint64 { return s.StoreErrors })
	add("settle_errors_total", "Failed settlements (confirm errors).", func(s Snapshot) uint64 { return s.SettleErrors })
	add("forgotten_total", "Audit bits rolled back for deliveries that come back unrun.", func(s Snapshot) uint64 { return s.Forgotten })
	auditFrom := len(c.counters)
	add("audit_evictions_total", "Producers evicted from the connection audit to make room.", func(s Snapshot) uint64 { return s.Audit.Evictions })
	add("audit_recent_evictions_total", "Producers evicted while still active within their window (producer churn: raise MaxProducers or investigate a producer-key flood).", func(s Snapshot) uint64 { return s.Audit.RecentEvictions })
	add("audit_destination_evictions_total", "Destination audits evicted from the connection audit by MaxDestinations or MaxConsumers (a destination flood: their duplicates pass undetected).", func(s Snapshot) uint64 { return s.Audit.AuditEvictions })
	add("audit_malformed_total", "Ids rejected by the connection audit as malformed.", func(s Snapshot) uint64 { return s.Audit.Malformed })
	add("audit_too_long_total", "Ids rejected by the connection audit for exceeding MaxIDLength.", func(s Snapshot) uint64 { return s.Audit.TooLong })
	add("audit_too_old_total", "Ids below their producer's audit window.", func(s Snapshot) uint64 { return s.Audit.TooOld })
	for i := auditFrom; i < len(c.counters); i++ {
		c.counters[i].audit = true
	}
	gauge := func(name, help string, read func(Snapshot) int) {
		c.gauges = append(c.gauges, gaugeDesc{
			desc: prometheus.NewDesc("msgaudit_receiver_"+name, help, nil, labels), read: read})
	}
	gauge("audit_producers", "Producers tracked by the connection audit now.", func(s Snapshot) int { return s.Audit.Producers })
	gauge("audit_queues", "Queue audits of the connection audit now.", func(s Snapshot) int { return s.Audit.Queues })
	gauge("audit_topics", "Topic audits of the connection audit now.", func(s Snapshot) int { return s.Audit.Topics })
	c.dup = prometheus.NewDesc("msgaudit_receiver_duplicates_total", "Duplicates absorbed, by the tier that knew.",
		[]string{"reason"}, labels)
	c.lat = prometheus.NewDesc("msgaudit_receiver_store_latency_seconds", "Latency of idempotency store calls.", nil, labels)
	return c
}

type counterDesc struct {
	desc  *prometheus.Desc
	read  func(Snapshot) uint64
	audit bool // exported only when an audit reports to the Metrics
}

type gaugeDesc struct {
	desc *prometheus.Desc
	read func(Snapshot) int
}

type collector struct {
	m        *Metrics
	counters []counterDesc
	gauges   []gaugeDesc
	dup, lat *prometheus.Desc
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
}

func (c *collector) Collect(ch chan<- prometheus.Metric) {
	s := c.m.Snapshot()
	audited := c.m.audited()
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
	for _, r := range []struct {
		reason string
		v      uint64
	}{{"audit", s.DuplicatesAudit}, {"store", s.DuplicatesStore}, {"in-flight", s.DuplicatesInFlight}, {"other", s.DuplicatesOther}} {
		ch <- prometheus.MustNewConstMetric(c.dup, prometheus.CounterValue, float64(r.v), r.reason)
	}
	buckets := make(map[float64]uint64, len(storeBuckets))
	var cum uint64
	for i, b := range storeBuckets {
		cum += s.StoreBuckets[i]
		buckets[b.Seconds()] = cum
	}
	ch <- prometheus.MustNewConstHistogram(c.lat, s.StoreCalls, s.StoreLatency.Seconds(), buckets)
}
