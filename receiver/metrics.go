package receiver

import (
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/acemq/msgaudit/connaudit"
	"github.com/acemq/msgaudit/internal/storelat"
)

// storeBuckets are the upper bounds of the store latency histogram.
var storeBuckets = storelat.Bounds

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
	// calls; StoreBuckets[i] counts calls no slower than the i-th of the
	// bounds 100 µs, 250 µs, 500 µs, 1 ms, 2.5 ms, 5 ms, 10 ms, 25 ms,
	// 50 ms, 100 ms, 250 ms and 1 s (and slower than the one before).
	StoreCalls   atomic.Uint64
	StoreNanos   atomic.Uint64
	StoreBuckets [len(storelat.Bounds)]atomic.Uint64

	// auditMu serialises addAudit; audits is the list of connection
	// audits whose counters Snapshot reads (copy on write).
	auditMu sync.Mutex
	audits  atomic.Pointer[[]auditStatsReporter]

	// inflight holds the deliveries inside Process (InFlight,
	// OldestInFlight).
	inflight inflight
}

// addAudit makes m's snapshots report r's counters (once, however often
// it is added).
func (m *Metrics) addAudit(r auditStatsReporter) {
	if m == nil || r == nil {
		return
	}
	m.auditMu.Lock()
	defer m.auditMu.Unlock()
	var cur []auditStatsReporter
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
		st.FirstSeen += s.FirstSeen
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
	StoreBuckets                                                          []uint64      // per bound of Metrics.StoreBuckets, not cumulative
	// Audited reports whether a connection audit reports to these
	// Metrics; exporters leave the Audit counters out until one does.
	Audited bool
	// Audit sums the counters of the connection audits that report to
	// these Metrics (the Audit of a Receiver built with them), read when
	// the snapshot is taken; zero without one. Audit.RecentEvictions
	// growing means producers still active were evicted: MaxProducers is
	// too small or a producer-key flood is under way.
	Audit connaudit.Stats
	// InFlight is the number of deliveries inside Process when the
	// snapshot is taken (waiting for a handler, running it, or settling),
	// and OldestInFlight how long the oldest of them has been there: a
	// value that keeps growing is a stuck handler or a settlement that
	// does not return.
	InFlight       int
	OldestInFlight time.Duration
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
	s.Audited = m.audited()
	s.InFlight, s.OldestInFlight = m.inflight.read(time.Now())
	return s
}
