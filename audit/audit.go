package audit

import (
	"fmt"
	"math"
	"strings"
	"sync/atomic"
	"unsafe"

	"github.com/acemq/msgaudit/bitsetbin"
	"github.com/acemq/msgaudit/msgid"
)

// entry is one tracked producer: its links in the audit's LRU list, its
// key, its window and the audit's check counter at its last check (for
// telling recent evictions from stale ones).
type entry struct {
	// The window first: its fields that a check reads fill the first 64
	// bytes. Then what every check also touches: the key (compared on a
	// hash match) and the two stamps; the links last (a strict list only).
	bin bitsetbin.Bin
	// key is the producer key. One of up to len(kb) bytes (OpenWire keys
	// are 35 to 48 as a rule) is held in kb, so that a lookup compares it
	// in the entry's own lines, without loading key's pointer first, and
	// the key costs no allocation of its own; key then points into kb
	// (setKey). So an entry must never be copied, and key is cloned
	// before it leaves the audit (OnEvict), since a spare entry's kb is
	// overwritten.
	key     string
	kb      [inlineKey]byte
	touched uint64
	// order is, in a lazy list, the tick of the last lookup (lru.go); in
	// a shard of a Sharded audit, the epoch that orders producers across
	// shards: 2k when inserted as the k-th insert, 2k+1 when last checked
	// after the k-th insert (see budget.clock).
	order      uint64
	prev, next *entry // towards the most / least recently used (lru.go)
}

// inlineKey is the longest key an entry holds in itself.
const inlineKey = 48

// setKey makes a copy of key the entry's key, in the entry when it fits
// there and a clone otherwise (key is usually a substring of the caller's
// id, which the audit must not pin), and returns the copy.
func (e *entry) setKey(key string) string {
	if len(key) <= len(e.kb) {
		copy(e.kb[:], key)
		e.key = unsafe.String(&e.kb[0], len(key))
	} else {
		e.key = strings.Clone(key)
	}
	return e.key
}

// paddedEntry is an entry padded to paddedEntrySize bytes. Shards of a
// Sharded audit allocate these, so that goroutines checking producers of
// different shards never write to the same cache line or 128-byte line
// pair (the adjacent-line prefetcher's unit): the allocator places them on
// 128-byte boundaries, the padding first and the entry's 192 bytes last.
// An unsynchronized audit does not pay for it. A zero-sized last field
// would make Go pad the struct by a word (so that its address stays
// inside), which took an entry of 192 bytes to 200 and its allocation
// across lines; hence the padding comes first.
type paddedEntry struct {
	_ [paddedEntrySize - unsafe.Sizeof(entry{})]byte // fails to compile if an entry outgrows it
	entry
}

// paddedEntrySize is a shard entry's size: three 128-byte units. How far
// apart the entries of different goroutines' producers lie moves Sharded's
// scaling more than expected, and not monotonically. Medians of
// cmd/msgaudit/internal/bench/scaling.sh (two goroutines against one, 6 processes each) on a
// 2-core AMD EPYC VM, by entry size: 192 B 1.15×, 256 B 1.21–1.32×, 384 B
// 1.55–1.73×, 640 B 1.26×, 1024 B 1.60×; 512 B ran two goroutines slower
// than one in alternating runs. Why is not known; 384 is the smallest of
// the sizes that scaled.
const paddedEntrySize = 384

// newEntry returns an entry with an unanchored window of depth d (the ring
// is allocated by the first Mark), padded when it is for a shard.
func newEntry(d int, padded bool) *entry {
	var e *entry
	if padded {
		e = &new(paddedEntry).entry
	} else {
		e = new(entry)
	}
	if err := e.bin.Resize(d); err != nil {
		// Unreachable: the depth was validated.
		panic("audit: " + err.Error())
	}
	return e
}

// eviction is an eviction waiting to be reported to Options.OnEvict.
type eviction struct {
	key    string
	recent bool
}

// counters are Stats without Producers; plain integers, the owner of the
// Audit serialises access.
type counters struct {
	checks     uint64
	sightings  [4]uint64 // indexed by Sighting&3
	malformed  uint64
	tooLong    uint64
	evictions  uint64
	recentEvic uint64
	rollbacks  uint64
}

// Audit is the unsynchronized message audit: an LRU of producer keys, each
// with a sliding window of sequences. It must not be used by several
// goroutines at once; use Locked or Sharded for that. The zero value is not
// usable: create one with New.
type Audit struct {
	// lru and the first counters are what a check touches: they come
	// first so that, behind a shard's mutex, they share its cache line.
	lru producers
	// oldest is, in a shard of a Sharded audit, the epoch of its least
	// recently used producer (math.MaxUint64 when empty), published so
	// that other shards can pick the oldest victim without locking.
	oldest atomic.Uint64
	st     counters
	cfg    config
	// pending holds evictions not yet reported to cfg.onEvict (only
	// filled when onEvict is set).
	pending []eviction
	// spare is the entry of the last evicted producer, reset and reused by
	// the next insert so a churn of producers does not allocate windows.
	spare *entry
	// budget, when not nil, is the producer budget shared by the shards
	// of a Sharded audit; it replaces the per-audit cap.
	budget *budget
}

// New returns an empty unsynchronized audit configured by o.
func New(o Options) (*Audit, error) {
	cfg, err := o.config()
	if err != nil {
		return nil, err
	}
	return newAudit(cfg, nil), nil
}

func newAudit(cfg config, b *budget) *Audit {
	a := &Audit{lru: newProducers(b != nil), cfg: cfg, budget: b}
	a.oldest.Store(math.MaxUint64)
	return a
}

// publishOldest refreshes oldest after the shard's LRU tail may have
// changed. A no-op for a standalone audit.
func (a *Audit) publishOldest() {
	if a.budget == nil {
		return
	}
	if e, ok := a.lru.GetOldest(); ok {
		a.oldest.Store(e.order)
	} else {
		a.oldest.Store(math.MaxUint64)
	}
}

// touchShard stamps a tracked producer of a shard with the current epoch
// and republishes the shard's oldest epoch if it was the LRU tail.
func (a *Audit) touchShard(e *entry) {
	if stamp := a.budget.clock.Load() | 1; e.order != stamp {
		a.restamp(e, stamp)
	}
	// Otherwise checked since the last insert already: nothing to
	// republish (and no atomic store, which costs more than the rest of a
	// check).
}

// restamp stamps e with stamp and republishes the shard's oldest epoch if e
// was its least recently used producer.
func (a *Audit) restamp(e *entry, stamp uint64) {
	old := e.order
	e.order = stamp
	if old == a.oldest.Load() {
		a.publishOldest()
	}
}

// Check records id ("<producer key>:<sequence>", see msgid.Split) and
// returns FirstSeen the first time, Duplicate when it was recorded before and not
// rolled back, and TooOld when its sequence lies below the producer's window
// (nothing recorded). An id longer than MaxIDLength returns an error
// wrapping msgid.ErrTooLong, a malformed id one wrapping msgid.ErrMalformed;
// either is counted, creates no producer entry and comes with TooOld ("the
// audit cannot tell"). Checking a tracked producer allocates nothing; a new
// producer may evict the least recently used one.
func (a *Audit) Check(id string) (Sighting, error) {
	if len(id) > a.cfg.maxIDLength {
		_, _, err := a.reject(id)
		return TooOld, err
	}
	key, seq, err := msgid.Split(id)
	if err != nil {
		a.st.checks++
		a.st.malformed++
		return TooOld, err
	}
	a.st.checks++
	if e, found := a.lru.Get(key); found {
		return a.mark(e, seq), nil // the hot path, inlined
	}
	v, _ := a.checkMiss(key, seq, false)
	if len(a.pending) != 0 {
		a.flush()
	}
	return v, nil
}

// mark checks seq on a tracked producer (a shard's caller also stamps the
// epoch). The caller counted the check.
func (a *Audit) mark(e *entry, seq uint64) (v Sighting) {
	e.touched = a.st.checks
	v = e.bin.Mark(seq)
	a.st.sightings[v&3]++
	return
}

// reject counts and reports an id longer than MaxIDLength (kept out of
// line so that split stays small).
func (a *Audit) reject(id string) (string, uint64, error) {
	a.st.checks++
	a.st.tooLong++
	_, _, err := msgid.SplitLimit(id, a.cfg.maxIDLength)
	return "", 0, err
}

func (a *Audit) countReject(err error) {
	if isTooLong(err) {
		a.st.tooLong++
	} else {
		a.st.malformed++
	}
}

// CheckKey is Check for an id already split into producer key and
// sequence. An empty key (counted Malformed) or one longer than MaxIDLength
// (counted TooLong) records nothing and returns TooOld.
func (a *Audit) CheckKey(key string, seq uint64) Sighting {
	v, _ := a.checkKey(key, seq)
	if len(a.pending) != 0 {
		a.flush()
	}
	return v
}

// IsDuplicate is ActiveMQ's isDuplicate(String): it records id like Check
// and reports whether the sighting is Duplicate. Malformed, too long and
// too old ids are not duplicates.
func (a *Audit) IsDuplicate(id string) bool {
	v, err := a.Check(id)
	return err == nil && v == Duplicate
}

// checkKey is the hot path shared by all audit types. ok is false only in
// a shard of a Sharded audit whose budget is exhausted; the check is then
// not counted and the caller must free a slot and call checkKeyToken.
func (a *Audit) checkKey(key string, seq uint64) (v Sighting, ok bool) {
	a.st.checks++
	if e, found := a.lru.Get(key); found {
		e.touched = a.st.checks
		if a.budget != nil {
			a.touchShard(e)
		}
		v = e.bin.Mark(seq)
		a.st.sightings[v&3]++
		return v, true
	}
	return a.checkMiss(key, seq, false)
}

// checkKeyToken is checkKey for a caller holding a budget slot (Sharded).
// It reports whether the slot was used; if not, the caller releases it.
func (a *Audit) checkKeyToken(key string, seq uint64) (v Sighting, used bool) {
	a.st.checks++
	if e, found := a.lru.Get(key); found {
		e.touched = a.st.checks
		a.touchShard(e)
		v = e.bin.Mark(seq)
		a.st.sightings[v&3]++
		return v, false
	}
	if key == "" || len(key) > a.cfg.maxIDLength {
		v, _ = a.checkMiss(key, seq, true) // counts the rejection
		return v, false
	}
	v, _ = a.checkMiss(key, seq, true)
	return v, true
}

func (a *Audit) checkMiss(key string, seq uint64, token bool) (Sighting, bool) {
	if key == "" {
		a.st.malformed++
		return TooOld, true
	}
	if len(key) > a.cfg.maxIDLength {
		a.st.tooLong++
		return TooOld, true
	}
	e := a.insert(key, token)
	if e == nil {
		a.st.checks--
		return TooOld, false
	}
	e.touched = a.st.checks
	v := e.bin.Mark(seq)
	a.st.sightings[v&3]++
	return v, true
}

// insert adds a producer. A standalone audit first evicts its least
// recently used producer when the cap is reached; a shard takes a slot
// from the shared budget, or returns nil when there is none (the Sharded
// audit then chooses a victim across shards).
func (a *Audit) insert(key string, token bool) *entry {
	switch {
	case token:
	case a.budget == nil:
		if a.lru.Len() >= a.cfg.maxProducers {
			a.evictOldest()
		}
	case !a.budget.take():
		return nil
	}
	e := a.spare
	a.spare = nil
	if e == nil {
		e = newEntry(a.cfg.depth, a.budget != nil)
	} else {
		e.bin.Reset()
	}
	if a.budget != nil {
		e.order = a.budget.clock.Add(2)
	}
	a.lru.Add(key, e)
	if a.lru.Len() == 1 {
		a.publishOldest()
	}
	return e
}

// oldestEpoch returns the epoch of the least recently used producer.
func (a *Audit) oldestEpoch() (uint64, bool) {
	e, ok := a.lru.GetOldest()
	if !ok {
		return 0, false
	}
	return e.order, true
}

// evictOldest drops the least recently used producer and keeps its entry
// as the spare. It does not touch the budget.
func (a *Audit) evictOldest() {
	e, ok := a.lru.RemoveOldest()
	if !ok {
		return
	}
	key := e.key
	recent := a.st.checks-e.touched < uint64(a.cfg.depth)
	a.st.evictions++
	if recent {
		a.st.recentEvic++
	}
	if a.cfg.onEvict != nil {
		// The entry's kb is reused: the hook gets a key of its own.
		a.pending = append(a.pending, eviction{key: strings.Clone(key), recent: recent})
	}
	a.spare = e
	if a.budget != nil && a.budget.dir != nil {
		a.budget.dir.remove(fingerprint(a.lru.hs.sample(key)))
	}
	a.publishOldest()
}

// takePending returns the evictions waiting to be reported and forgets them.
func (a *Audit) takePending() []eviction {
	p := a.pending
	a.pending = nil
	return p
}

// flush reports pending evictions (unsynchronized Audit only).
func (a *Audit) flush() {
	report(a.cfg.onEvict, a.takePending())
}

func report(f func(string, bool), evs []eviction) {
	for _, e := range evs {
		f(e.key, e.recent)
	}
}

// Rollback clears id's bit so that its redelivery is FirstSeen again. A producer
// that is not tracked, or a sequence outside the window, is a no-op that
// creates nothing. A malformed or too long id is an error (and counted).
func (a *Audit) Rollback(id string) error {
	key, seq, err := msgid.SplitLimit(id, a.cfg.maxIDLength)
	if err != nil {
		a.countReject(err)
		return err
	}
	a.RollbackKey(key, seq)
	return nil
}

// RollbackKey is Rollback for an id already split into key and sequence.
// It refreshes the producer's recency, as ActiveMQ does.
func (a *Audit) RollbackKey(key string, seq uint64) {
	e, ok := a.lru.Get(key)
	if !ok {
		return
	}
	if a.budget != nil {
		a.touchShard(e) // Get moved it to the front: keep epochs in list order
	}
	if e.bin.Unmark(seq) {
		a.st.rollbacks++
	}
}

// IsInOrder reports whether id's sequence is the successor of the previous
// IsInOrder sequence of its producer (ActiveMQ's isInOrder: the first call
// for a producer is true; it records the sequence; it ignores the window's
// bits). A producer that is not tracked gives true and is not created.
func (a *Audit) IsInOrder(id string) (bool, error) {
	key, seq, err := msgid.SplitLimit(id, a.cfg.maxIDLength)
	if err != nil {
		a.countReject(err)
		return false, err
	}
	e, ok := a.lru.Get(key)
	if !ok {
		return true, nil
	}
	if a.budget != nil {
		a.touchShard(e)
	}
	return e.bin.IsInOrder(seq), nil
}

// LastSeq returns the highest sequence currently recorded for key, or
// false when the producer is not tracked or has nothing recorded. It is a
// pure read: it does not refresh the producer's recency.
func (a *Audit) LastSeq(key string) (uint64, bool) {
	e, ok := a.lru.Peek(key)
	if !ok {
		return 0, false
	}
	return e.bin.LastSetIndex()
}

// Clear forgets every producer. The counters are kept.
func (a *Audit) Clear() {
	a.lru.Purge()
	a.spare = nil
	a.publishOldest()
}

// Len returns the number of producers tracked.
func (a *Audit) Len() int { return a.lru.Len() }

// Depth returns the configured window depth.
func (a *Audit) Depth() int { return a.cfg.depth }

// MaxProducers returns the producer cap.
func (a *Audit) MaxProducers() int { return a.cfg.maxProducers }

// SetDepth changes the window depth of every tracked producer and of those
// created later, keeping every recorded sequence that is still inside the
// new window (growing keeps them all). 0 means DefaultDepth.
func (a *Audit) SetDepth(d int) error {
	d, err := checkDepth(d)
	if err != nil {
		return err
	}
	if err := a.setDepth(d); err != nil {
		return err
	}
	return nil
}

func (a *Audit) setDepth(d int) error {
	for _, e := range a.lru.Values() {
		if err := e.bin.Resize(d); err != nil {
			return fmt.Errorf("audit: resize window: %w", err)
		}
	}
	a.cfg.depth = d
	a.spare = nil
	return nil
}

// SetMaxProducers changes the producer cap without clearing. Shrinking
// evicts the least recently used producers beyond n (counted as evictions
// and reported to OnEvict), keeping the n most recently used (AMQ-4233);
// growing keeps every producer. 0 means DefaultMaxProducers.
func (a *Audit) SetMaxProducers(n int) error {
	n, err := checkMaxProducers(n)
	if err != nil {
		return err
	}
	a.setMaxProducers(n)
	if len(a.pending) != 0 {
		a.flush()
	}
	return nil
}

func (a *Audit) setMaxProducers(n int) {
	for a.lru.Len() > n {
		a.evictOldest()
	}
	a.cfg.maxProducers = n
}

// Stats returns the counters and the number of producers tracked.
func (a *Audit) Stats() Stats {
	return Stats{
		Checks:          a.st.checks,
		FirstSeen:       a.st.sightings[FirstSeen],
		Duplicates:      a.st.sightings[Duplicate],
		TooOld:          a.st.sightings[TooOld],
		Malformed:       a.st.malformed,
		TooLong:         a.st.tooLong,
		Evictions:       a.st.evictions,
		RecentEvictions: a.st.recentEvic,
		Rollbacks:       a.st.rollbacks,
		Producers:       a.lru.Len(),
	}
}
