package receiver

import (
	"log/slog"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/acemq/msgaudit/bitsetbin"
	"github.com/acemq/msgaudit/connaudit"
	"github.com/acemq/msgaudit/internal/nilcheck"
)

// maxCachedDestinations bounds ConnAudit's cache of parsed destination
// names; names beyond it are parsed on every call.
const maxCachedDestinations = 4096

// churnInterval is the shortest interval between two producer-churn
// warnings of a ConnAudit adapter.
const churnInterval = time.Minute

// churnPoll is the longest interval between two reads of the connection
// audit's Stats by the check path (shorter when the churn interval is).
const churnPoll = time.Second

// churnSample: the check path reads the clock on about one FirstSeen sighting in
// churnSample (chosen by a per-thread random number, no shared write), as a
// clock read costs about as much as the check itself on some machines.
const churnSample = 16

// churnHint is the advice logged with a producer-churn warning.
const churnHint = "raise MaxProducers or investigate a producer-key flood"

// auditStatsReporter is implemented by an Auditor that can report the
// counters of its connection audit (the ConnAudit adapter does). Metrics
// read it when a snapshot is taken or a collector is scraped; it must be
// safe for concurrent use.
type auditStatsReporter interface {
	AuditStats() connaudit.Stats
}

// ConnAudit adapts a connection audit to Auditor. Destinations are parsed
// with connaudit.ParseDestination ("/queue/a", "/topic/b", ...); a name
// without a leading '/' (an AMQP queue name) is a queue. An unparseable
// destination is an error, which the memory selector treats like an
// unparseable id (durable tier only, or dead-letter without one).
//
// The Receiver the adapter is given to (Config.Audit) reports the audit's
// counters in its Metrics (Snapshot.Audit; several adapters reporting to
// one Metrics are summed), and the adapter makes producer churn visible
// through the Receiver's Logger: when producers still active within their window were evicted
// (connaudit.Stats.RecentEvictions grew, a sign that MaxProducers is too
// small or that a producer-key flood is under way), or destination audits
// were evicted (connaudit.Stats.AuditEvictions grew: MaxDestinations or
// MaxConsumers too small, or a destination flood), it logs one warning
// per minute at most (by Config.Clock) with the number of such
// evictions since the last warning and the totals. The check path reads
// the audit's Stats at most once per second, and only for checks whose sighting is FirstSeen, since a producer is evicted
// only to make room for a new one; about one New check in 16 reads the
// clock and compares it with an atomic timestamp, the others cost a
// random number. So a warning comes after the first poll that sees the
// evictions, at least a second after the adapter was made, and waits for
// new ids: the counters are exact at any time through AuditStats.
// An adapter given to several Receivers warns through the logger of the
// first that has one, by the clock of the first.
func ConnAudit(a *connaudit.Audit) Auditor {
	c := &connAuditor{a: a}
	c.churn.interval = churnInterval
	c.churn.poll = min(churnPoll, c.churn.interval)
	c.churn.setClock(time.Now)
	return c
}

type connAuditor struct {
	a     *connaudit.Audit
	mu    sync.RWMutex
	dests map[string]connaudit.Destination
	churn churnWarner
}

// churnWarner rate-limits the producer-churn warning of one adapter.
type churnWarner struct {
	log   atomic.Pointer[slog.Logger]
	bound bool // a Receiver has set the clock; guarded by mu
	now   func() time.Time
	base  time.Time     // the clock when the adapter was made
	poll  time.Duration // shortest interval between two Stats reads
	// interval is the shortest interval between two warnings.
	interval time.Duration
	// next is when (nanoseconds since base) the check path may read Stats
	// again.
	next atomic.Int64

	mu         sync.Mutex // guards bound, warned, warnedDest and nextWarn
	warned     uint64     // RecentEvictions reported by the last warning
	warnedDest uint64     // AuditEvictions reported by the last warning
	nextWarn   time.Duration
}

// setClock makes now the warner's clock, starting from now.
func (w *churnWarner) setClock(now func() time.Time) {
	w.now = now
	w.base = now()
	w.next.Store(int64(w.poll))
}

// since returns the clock in nanoseconds since the adapter was made.
func (w *churnWarner) since() time.Duration { return w.now().Sub(w.base) }

// check is called after a FirstSeen sighting: if a poll is due, it reads the
// audit's counters and warns when recent evictions grew and no warning was
// logged within the interval.
func (w *churnWarner) check(a *connaudit.Audit) {
	log := w.log.Load()
	if log == nil || rand.Uint32()%churnSample != 0 {
		return
	}
	now := w.since()
	next := w.next.Load()
	if int64(now) < next || !w.next.CompareAndSwap(next, int64(now+w.poll)) {
		return
	}
	w.warn(log, now, a.Stats())
}

func (w *churnWarner) warn(log *slog.Logger, now time.Duration, st connaudit.Stats) {
	w.mu.Lock()
	producers, dests := st.RecentEvictions > w.warned, st.AuditEvictions > w.warnedDest
	if !(producers || dests) || now < w.nextWarn {
		w.mu.Unlock()
		return
	}
	n, nd := st.RecentEvictions-w.warned, st.AuditEvictions-w.warnedDest
	w.warned, w.warnedDest = st.RecentEvictions, st.AuditEvictions
	w.nextWarn = now + w.interval
	w.mu.Unlock()
	if dests {
		log.Warn("msgaudit: destination audits were evicted from the connection audit (MaxDestinations, MaxConsumers); duplicates on those destinations can pass undetected",
			slog.Uint64("destination_evictions", nd),
			slog.Uint64("destination_evictions_total", st.AuditEvictions),
			slog.Int("queues", st.Queues),
			slog.Int("topics", st.Topics),
			slog.Duration("interval", w.interval),
			slog.String("hint", "raise connaudit.Options.MaxDestinations / MaxConsumers, or look for a destination flood"))
	}
	if !producers {
		return
	}
	log.Warn("msgaudit: producers active within their window were evicted from the connection audit; their duplicates can pass undetected",
		slog.Uint64("recent_evictions", n),
		slog.Uint64("recent_evictions_total", st.RecentEvictions),
		slog.Uint64("evictions_total", st.Evictions),
		slog.Int("producers", st.Producers),
		slog.Duration("interval", w.interval),
		slog.String("hint", churnHint))
}

// bindAuditor connects the receiver's logger, clock and metrics to a: a
// ConnAudit adapter warns through the first logger and by the first clock
// bound to it, and an Auditor that implements auditStatsReporter is read
// by m's snapshots and collectors. Binding twice is harmless. An Auditor
// that wraps an adapter (a transport's, letting some keys past it) and
// says so with an Unwrap() Auditor method has the adapter it wraps bound
// to the logger and clock; its own stats, if it reports them, are read.
func bindAuditor(a Auditor, log *slog.Logger, clock interface{ Now() time.Time }, m *Metrics) {
	c, ok := a.(*connAuditor)
	if w, wraps := a.(interface{ Unwrap() Auditor }); !ok && wraps {
		c, ok = w.Unwrap().(*connAuditor)
	}
	if ok {
		if log != nil {
			c.churn.log.CompareAndSwap(nil, log)
		}
		c.churn.mu.Lock()
		if !c.churn.bound {
			c.churn.bound = true
			if clock != nil && !nilcheck.IsNil(clock) {
				c.churn.setClock(clock.Now)
			}
		}
		c.churn.mu.Unlock()
	}
	if r, ok := a.(auditStatsReporter); ok {
		m.addAudit(r)
	}
}

// AuditStats returns the counters of the connection audit.
func (c *connAuditor) AuditStats() connaudit.Stats { return c.a.Stats() }

func (c *connAuditor) dest(s string) (connaudit.Destination, error) {
	c.mu.RLock()
	d, ok := c.dests[s]
	c.mu.RUnlock()
	if ok {
		return d, nil
	}
	var err error
	switch {
	case s == "":
		// The zero destination: connaudit records nothing for it.
	case !strings.HasPrefix(s, "/"):
		d = connaudit.Destination{Kind: connaudit.Queue, Name: s}
	default:
		if d, err = connaudit.ParseDestination(s); err != nil {
			return d, err
		}
	}
	c.mu.Lock()
	if c.dests == nil {
		c.dests = make(map[string]connaudit.Destination)
	}
	if len(c.dests) < maxCachedDestinations {
		c.dests[s] = d
	}
	c.mu.Unlock()
	return d, nil
}

// Check records id in the audit of (consumer, destination).
func (c *connAuditor) Check(consumer, destination, id string) (bitsetbin.Sighting, error) {
	d, err := c.dest(destination)
	if err != nil {
		return bitsetbin.TooOld, err
	}
	v, err := c.a.Check(consumer, d, id)
	if v == bitsetbin.FirstSeen && err == nil {
		c.churn.check(c.a)
	}
	return v, err
}

// Rollback clears id in the audit of (consumer, destination).
func (c *connAuditor) Rollback(consumer, destination, id string) error {
	d, err := c.dest(destination)
	if err != nil {
		return err
	}
	return c.a.Rollback(consumer, d, id)
}
