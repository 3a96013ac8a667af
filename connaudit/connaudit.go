package connaudit

import (
	"fmt"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/acemq/msgaudit/audit"
)

// defaultMaxDestinations is the default cap of queue audits, and
// defaultMaxConsumers that of topic audits (ActiveMQ's ConnectionAudit caps
// both maps at 1000).
const (
	defaultMaxDestinations = 1000
	defaultMaxConsumers    = 1000
	// MaxTableLimit is the largest MaxDestinations / MaxConsumers accepted.
	MaxTableLimit = 1 << 20
)

// Options configures a connection audit. Zero values mean the defaults.
type Options struct {
	// Depth, MaxProducers and MaxIDLength configure every destination's
	// audit (see audit.Options; defaults 2048, 64, 1024).
	Depth, MaxProducers, MaxIDLength int
	// MaxDestinations caps the queue (and temporary queue) audits: one per
	// destination, shared by every consumer. Default 1000.
	MaxDestinations int
	// MaxConsumers caps the topic (and temporary topic) audits: one per
	// (consumer, destination) pair. Default 1000.
	MaxConsumers int
	// Disabled turns checking off: Check returns FirstSeen and records
	// nothing (SetEnabled turns it back on).
	Disabled bool
	// Shards, when positive, makes each destination's audit an
	// audit.Sharded with that many shards instead of an audit.Locked: for a
	// queue whose many producers are checked by many goroutines at once.
	Shards int
}

// Stats are the counters of a connection audit.
type Stats struct {
	// Stats sums the counters of the destination audits, including those
	// evicted or removed (their counters are kept); Producers is the number
	// of producers tracked now over all audits.
	audit.Stats
	// NoDestination and NoID count checks without a destination or without
	// an id (not duplicates, nothing recorded); Disabled counts checks while
	// checking was off.
	NoDestination, NoID, Disabled uint64
	// Queues and Topics are the number of queue and topic audits now.
	Queues, Topics int
	// AuditEvictions counts audits dropped by the MaxDestinations and
	// MaxConsumers caps.
	AuditEvictions uint64
}

// auditor is the audit behind one destination: *audit.Locked or
// *audit.Sharded.
type auditor interface {
	Check(id string) (audit.Sighting, error)
	Rollback(id string) error
	SetDepth(d int) error
	SetMaxProducers(n int) error
	Stats() audit.Stats
	Len() int
	MarshalBinary() ([]byte, error)
	UnmarshalBinary(data []byte) error
}

// topicKey identifies a topic audit: one per consumer and destination.
type topicKey struct {
	consumer string
	dest     Destination
}

func cloneDest(d Destination) Destination { return Destination{d.Kind, strings.Clone(d.Name)} }

func cloneTopicKey(k topicKey) topicKey {
	return topicKey{strings.Clone(k.consumer), cloneDest(k.dest)}
}

// settings are the options that change at run time, guarded by Audit.mu.
type settings struct {
	depth, maxProducers, maxIDLength int
	maxDestinations, maxConsumers    int
	shards                           int
}

// Audit is ActiveMQ's ConnectionAudit for one connection: queue audits
// shared by all consumers, topic audits per consumer. It is safe for
// concurrent use; see the package documentation for what runs in parallel.
type Audit struct {
	queues *table[Destination]
	topics *table[topicKey]

	enabled atomic.Bool
	noDest  atomic.Uint64
	noID    atomic.Uint64
	off     atomic.Uint64

	// mu serialises configuration changes, snapshots and the accounting
	// of dropped audits; it is never taken by Check or Rollback except
	// when an audit is created.
	mu      sync.Mutex
	cfg     settings
	retired audit.Stats // counters of dropped audits
	dropped uint64      // audits evicted by the caps
}

// New returns a connection audit configured by o.
func New(o Options) (*Audit, error) {
	cfg, err := o.settings()
	if err != nil {
		return nil, err
	}
	a := &Audit{
		queues: newTable[Destination](cfg.maxDestinations),
		topics: newTable[topicKey](cfg.maxConsumers),
		cfg:    cfg,
	}
	a.enabled.Store(!o.Disabled)
	return a, nil
}

func (o Options) settings() (settings, error) {
	if _, err := audit.New(audit.Options{Depth: o.Depth, MaxProducers: o.MaxProducers, MaxIDLength: o.MaxIDLength}); err != nil {
		return settings{}, fmt.Errorf("%w: %w", ErrOptions, err)
	}
	md, err := tableCap("MaxDestinations", o.MaxDestinations, defaultMaxDestinations)
	if err != nil {
		return settings{}, err
	}
	mc, err := tableCap("MaxConsumers", o.MaxConsumers, defaultMaxConsumers)
	if err != nil {
		return settings{}, err
	}
	if o.Shards < 0 || o.Shards > audit.MaxShards {
		return settings{}, fmt.Errorf("%w: Shards %d (want 0..%d)", ErrOptions, o.Shards, audit.MaxShards)
	}
	return settings{
		depth: o.Depth, maxProducers: o.MaxProducers, maxIDLength: o.MaxIDLength,
		maxDestinations: md, maxConsumers: mc, shards: o.Shards,
	}, nil
}

func tableCap(name string, n, def int) (int, error) {
	switch {
	case n < 0 || n > MaxTableLimit:
		return 0, fmt.Errorf("%w: %s %d (want 0..%d)", ErrOptions, name, n, MaxTableLimit)
	case n == 0:
		return def, nil
	}
	return n, nil
}

// newAuditor creates a destination audit with the current settings.
// Called with a.mu held (directly or through a table's mu and cfgSnapshot).
func newAuditor(cfg settings) auditor {
	o := audit.Options{Depth: cfg.depth, MaxProducers: cfg.maxProducers, MaxIDLength: cfg.maxIDLength}
	var (
		au  auditor
		err error
	)
	if cfg.shards > 0 {
		au, err = audit.NewSharded(o, cfg.shards)
	} else {
		au, err = audit.NewLocked(o)
	}
	if err != nil {
		// Unreachable: the settings were validated.
		panic("connaudit: " + err.Error())
	}
	return au
}

// route returns the audit of (consumer, d), creating it if create is set;
// nil if it does not exist and create is not set.
func (a *Audit) route(consumer string, d Destination, create bool) auditor {
	if d.IsQueue() {
		if !create {
			return a.queues.lookup(d)
		}
		au, ev := a.queues.getOrCreate(d, cloneDest, a.creator)
		if ev != nil {
			a.retire(true, ev)
		}
		return au
	}
	k := topicKey{consumer, d}
	if !create {
		return a.topics.lookup(k)
	}
	au, ev := a.topics.getOrCreate(k, cloneTopicKey, a.creator)
	if ev != nil {
		a.retire(true, ev)
	}
	return au
}

// creator builds a new destination audit from the current settings.
func (a *Audit) creator() auditor {
	a.mu.Lock()
	cfg := a.cfg
	a.mu.Unlock()
	return newAuditor(cfg)
}

// retire accounts for dropped audits.
func (a *Audit) retire(evicted bool, aus ...auditor) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, au := range aus {
		st := au.Stats()
		st.Producers = 0
		addStats(&a.retired, st)
		if evicted {
			a.dropped++
		}
	}
}

func addStats(s *audit.Stats, t audit.Stats) {
	s.Checks += t.Checks
	s.FirstSeen += t.FirstSeen
	s.Duplicates += t.Duplicates
	s.TooOld += t.TooOld
	s.Malformed += t.Malformed
	s.TooLong += t.TooLong
	s.Evictions += t.Evictions
	s.RecentEvictions += t.RecentEvictions
	s.Rollbacks += t.Rollbacks
	s.Producers += t.Producers
}

// Check records message id delivered to consumer from destination d and
// returns its sighting. Queue messages are audited per destination (shared
// by all consumers), topic messages per (consumer, destination). When
// checking is disabled, d is the zero Destination (or has no name), or id
// is empty, the message is FirstSeen and nothing is recorded (counted in
// Stats). A destination of an invalid kind is an error wrapping
// ErrDestination; a malformed or too long id an error from audit.Check.
func (a *Audit) Check(consumer string, d Destination, id string) (audit.Sighting, error) {
	if !a.enabled.Load() {
		a.off.Add(1)
		return audit.FirstSeen, nil
	}
	if d.Name == "" {
		if d.Kind != 0 && !d.Kind.Valid() {
			return audit.TooOld, d.validate()
		}
		a.noDest.Add(1)
		return audit.FirstSeen, nil
	}
	if !d.Kind.Valid() {
		return audit.TooOld, d.validate()
	}
	if id == "" {
		a.noID.Add(1)
		return audit.FirstSeen, nil
	}
	return a.route(consumer, d, true).Check(id)
}

// IsDuplicate is Check reporting only whether the sighting is Duplicate
// (ActiveMQ's ConnectionAudit.isDuplicate); errors are not duplicates.
func (a *Audit) IsDuplicate(consumer string, d Destination, id string) bool {
	v, err := a.Check(consumer, d, id)
	return err == nil && v == audit.Duplicate
}

// Rollback clears id in the audit of (consumer, d) so its redelivery is
// FirstSeen again (ActiveMQ's rollbackDuplicate). It never creates an
// audit; with no destination, no id or no audit it is a no-op. Like
// ActiveMQ, it works whether checking is enabled or not.
func (a *Audit) Rollback(consumer string, d Destination, id string) error {
	if d.Name == "" || id == "" {
		return nil
	}
	if !d.Kind.Valid() {
		return d.validate()
	}
	if au := a.route(consumer, d, false); au != nil {
		return au.Rollback(id)
	}
	return nil
}

// RemoveConsumer drops the topic audits of consumer (ActiveMQ's
// removeDispatcher). Queue audits are shared and stay.
func (a *Audit) RemoveConsumer(consumer string) {
	gone := a.topics.removeIf(func(k topicKey) bool { return k.consumer == consumer })
	if len(gone) != 0 {
		a.retire(false, gone...)
	}
}

// SetEnabled turns checking on or off.
func (a *Audit) SetEnabled(on bool) { a.enabled.Store(on) }

// Enabled reports whether checking is on.
func (a *Audit) Enabled() bool { return a.enabled.Load() }

// lockTables takes every lock that guards audit creation, so configuration
// changes apply to existing audits and to every audit created afterwards.
func (a *Audit) lockTables() {
	a.queues.mu.Lock()
	a.topics.mu.Lock()
}

func (a *Audit) unlockTables() {
	a.topics.mu.Unlock()
	a.queues.mu.Unlock()
}

// SetDepth changes the window depth of every existing audit (without
// clearing) and of those created later. 0 means the default.
func (a *Audit) SetDepth(d int) error {
	if _, err := audit.New(audit.Options{Depth: d}); err != nil {
		return fmt.Errorf("%w: %w", ErrOptions, err)
	}
	a.lockTables()
	defer a.unlockTables()
	a.mu.Lock()
	a.cfg.depth = d
	a.mu.Unlock()
	return a.each(func(au auditor) error { return au.SetDepth(d) })
}

// SetMaxProducers changes the producer cap of every existing audit
// (keeping the most recently used producers when shrinking) and of those
// created later. 0 means the default.
func (a *Audit) SetMaxProducers(n int) error {
	if _, err := audit.New(audit.Options{MaxProducers: n}); err != nil {
		return fmt.Errorf("%w: %w", ErrOptions, err)
	}
	a.lockTables()
	defer a.unlockTables()
	a.mu.Lock()
	a.cfg.maxProducers = n
	a.mu.Unlock()
	return a.each(func(au auditor) error { return au.SetMaxProducers(n) })
}

// each calls f on every audit (tables locked by the caller).
func (a *Audit) each(f func(auditor) error) error {
	for _, s := range a.queues.all() {
		if err := f(s.au); err != nil {
			return err
		}
	}
	for _, s := range a.topics.all() {
		if err := f(s.au); err != nil {
			return err
		}
	}
	return nil
}

// Stats returns the counters. Each destination audit's counters are a
// consistent snapshot; their sum is not an atomic snapshot of the whole
// connection while checks run.
func (a *Audit) Stats() Stats {
	var st Stats
	queues, topics := a.queues.all(), a.topics.all()
	for _, s := range queues {
		addStats(&st.Stats, s.au.Stats())
	}
	for _, s := range topics {
		addStats(&st.Stats, s.au.Stats())
	}
	a.mu.Lock()
	addStats(&st.Stats, a.retired)
	st.AuditEvictions = a.dropped
	a.mu.Unlock()
	st.NoDestination = a.noDest.Load()
	st.NoID = a.noID.Load()
	st.Disabled = a.off.Load()
	st.Queues, st.Topics = len(queues), len(topics)
	return st
}
