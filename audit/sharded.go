package audit

import (
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"sync"
	"unsafe"

	"github.com/acemq/msgaudit/msgid"
)

// MaxShards is the largest shard count NewSharded accepts.
const MaxShards = 4096

// shardBody is one independently locked Audit, inline so that the mutex,
// the LRU pointer and the check counters share one cache line.
type shardBody struct {
	mu sync.Mutex
	a  Audit
}

// shard pads a shardBody to a multiple of 128 bytes (two cache lines, the
// unit of the adjacent-line prefetcher) so that two shards never share a
// line: their counters are written on every check. The padding comes first
// because a zero-size last field would itself be padded; on 64-bit
// platforms it is empty (a shardBody is 256 bytes, TestShardSize).
type shard struct {
	_ [(128 - unsafe.Sizeof(shardBody{})%128) % 128]byte
	shardBody
}

// Sharded is a message audit safe for concurrent use that scales with
// cores: producers are spread over independently locked shards, so checks
// of producers in different shards run in parallel. A new producer is
// placed in an empty shard near the one its key hashes to, and a directory
// read without locks finds it there (directory.go), so that while shards
// outnumber producers no two producers share a shard. Checking a tracked
// producer locks only its shard; adding or evicting producers also takes
// the directory's lock, so new producers are added one at a time. Methods
// about the whole audit (Len, Stats, Clear, SetDepth, SetMaxProducers,
// snapshots) lock all shards, in order.
//
// The producer cap is shared by all shards (the total never exceeds it),
// so evictions happen exactly when they would in Locked. What differs is
// which producer is evicted. Producers are stamped with an epoch that
// counts inserts (a check after the k-th insert stamps 2k+1, the k-th
// insert 2k), and each shard publishes the epoch of its least recently used
// producer. A new producer evicts the least recently used producer of the
// shard with the oldest published epoch, comparing all shards when there
// are at most 256 and a random window of 256 of them otherwise. That is Locked's
// victim except that producers checked since the same insert tie (a tie
// goes to the new producer's shard, else to the first shard compared), a
// busy oldest shard is passed over for the new producer's own shard, and,
// beyond 256 shards, the oldest of a sample. A shrinking SetMaxProducers
// evicts oldest epochs first. "Recent" in Options.OnEvict is judged against
// the evicted producer's shard's own checks. Verdicts and windows are
// exactly those of Locked.
type Sharded struct {
	shards []shard
	// dir places producers in shards (nil with one shard).
	dir    *directory
	hs     hasher
	budget budget
	// maxIDLength and onEvict never change after construction.
	maxIDLength int
	onEvict     func(string, bool)
}

// NewSharded returns an empty sharded audit with the given number of
// shards. 0 means the default: four shards per producer of the cap,
// rounded up to a power of two, at least four per CPU (GOMAXPROCS) and at
// most MaxShards. Goroutines checking different producers then do not meet
// in a shard, so they do not exchange its cache lines (the mutex, the
// counters, the LRU list) and scale with cores; with fewer shards than
// producers they share shards. An empty shard costs 256 bytes (its table
// is allocated with its first producer); a producer in a Sharded audit
// costs 192 bytes more than in Audit, its entry being padded from 192 to
// 384 bytes (whole 128-byte units, see paddedEntry).
func NewSharded(o Options, shards int) (*Sharded, error) {
	cfg, err := o.config()
	if err != nil {
		return nil, err
	}
	switch {
	case shards < 0 || shards > MaxShards:
		return nil, fmt.Errorf("%w: %d shards (want 0..%d)", ErrOptions, shards, MaxShards)
	case shards == 0:
		shards = defaultShards(cfg.maxProducers)
	}
	s := &Sharded{
		shards:      make([]shard, shards),
		hs:          newHasher(),
		maxIDLength: cfg.maxIDLength,
		onEvict:     cfg.onEvict,
	}
	if shards > 1 {
		s.dir = newDirectory(shards)
		s.budget.dir = s.dir
	}
	s.budget.cap.Store(int64(cfg.maxProducers))
	for i := range s.shards {
		s.shards[i].a = *s.newShard(cfg)
	}
	return s, nil
}

// newShard returns the Audit of a shard. Its table hashes keys with the
// Sharded audit's hasher: one hash of a key picks the shard (high bits, see
// shardIndex) and the slot (low bits).
func (s *Sharded) newShard(cfg config) *Audit {
	a := newAudit(cfg, &s.budget)
	a.lru.hs = s.hs
	return a
}

// shardIndex returns the shard of a key whose hash is h, from the high 32
// bits only, so the shard says nothing of the low bits that place the key
// in its shard's table. The high bits are scaled to the shard count with a
// multiply and a shift (uniform, like a modulo, without a division's
// latency on every check).
func (s *Sharded) shardIndex(h uint64) uint64 {
	return (h >> 32) * uint64(len(s.shards)) >> 32
}

// Shards returns the number of shards.
func (s *Sharded) Shards() int { return len(s.shards) }

func defaultShards(maxProducers int) int {
	n := 1
	for n < MaxShards && (n < 4*maxProducers || n < 4*runtime.GOMAXPROCS(0)) {
		n *= 2
	}
	return n
}

func (s *Sharded) shardOf(key string) *shard {
	if len(s.shards) == 1 {
		return &s.shards[0]
	}
	return s.shardFor(s.hs.sample(key))
}

// shardFor returns the shard the directory gives for a key whose sampled
// hash is h, else its hashed shard. Without the directory's lock that is a
// hint: the caller must find the key there (see directory).
func (s *Sharded) shardFor(h uint64) *shard {
	if s.dir != nil {
		if j, ok := s.dir.lookup(fingerprint(h)); ok {
			return &s.shards[j]
		}
	}
	return &s.shards[s.shardIndex(h)]
}

// lockHolder locks and returns the shard that holds key if it is tracked
// (else its hashed shard). A producer cannot leave a locked shard.
func (s *Sharded) lockHolder(key string) *shard {
	sh := s.shardOf(key)
	sh.mu.Lock()
	if s.dir == nil || sh.a.lru.Contains(key) {
		return sh
	}
	sh.mu.Unlock()
	s.dir.mu.Lock()
	sh = s.shardOf(key) // exact under the directory's lock
	sh.mu.Lock()
	s.dir.mu.Unlock()
	return sh
}

// unlock releases sh and then reports the evictions the call made.
func (s *Sharded) unlock(sh *shard) {
	if len(sh.a.pending) == 0 {
		sh.mu.Unlock()
		return
	}
	evs := sh.a.takePending()
	sh.mu.Unlock()
	report(s.onEvict, evs)
}

func (s *Sharded) lockAll() {
	for i := range s.shards {
		s.shards[i].mu.Lock()
	}
}

func (s *Sharded) unlockAll() {
	var evs []eviction
	for i := range s.shards {
		evs = append(evs, s.shards[i].a.takePending()...)
		s.shards[i].mu.Unlock()
	}
	if len(evs) != 0 {
		report(s.onEvict, evs)
	}
}

// countReject counts an id rejected before it could be hashed (in shard 0).
func (s *Sharded) countReject(err error, check bool) {
	sh := &s.shards[0]
	sh.mu.Lock()
	if check {
		sh.a.st.checks++
	}
	sh.a.countReject(err)
	sh.mu.Unlock()
}

// Check is Audit.Check; only the producer's shard is locked.
func (s *Sharded) Check(id string) (Sighting, error) {
	if len(id) > s.maxIDLength {
		_, _, err := splitLimit(id, s.maxIDLength)
		s.countReject(err, true)
		return TooOld, err
	}
	key, seq, err := msgid.Split(id)
	if err != nil {
		s.countReject(err, true)
		return TooOld, err
	}
	h := s.hs.sample(key)
	sh := s.shardFor(h)
	sh.mu.Lock()
	sh.a.st.checks++
	if e, found := sh.a.lru.GetHashed(key, h); found {
		// The hot path: touchShard by hand (it is too big to inline).
		if stamp := s.budget.clock.Load() | 1; e.order != stamp {
			sh.a.restamp(e, stamp)
		}
		v := sh.a.mark(e, seq)
		sh.mu.Unlock()
		return v, nil
	}
	sh.a.st.checks--
	if s.dir != nil {
		sh.mu.Unlock()
		return s.checkPlaced(key, seq, h), nil
	}
	v := s.checkLocked(sh, key, seq)
	s.unlock(sh)
	return v, nil
}

// CheckKey is Audit.CheckKey; only the producer's shard is locked (and,
// when a new producer needs room, other shards are tried without waiting).
func (s *Sharded) CheckKey(key string, seq uint64) Sighting {
	h := s.hs.sample(key)
	sh := s.shardFor(h)
	sh.mu.Lock()
	if s.dir != nil && !sh.a.lru.Contains(key) {
		sh.mu.Unlock()
		return s.checkPlaced(key, seq, h)
	}
	v := s.checkLocked(sh, key, seq)
	s.unlock(sh)
	return v
}

// checkPlaced checks (key, seq), whose sampled hash is h, under the
// directory's lock: in the shard that holds the producer, or, for a new
// one, in the shard the directory places it in (then recorded there).
func (s *Sharded) checkPlaced(key string, seq uint64, h uint64) Sighting {
	d := s.dir
	f := fingerprint(h)
	d.mu.Lock()
	j := d.place(f, int(s.shardIndex(h)))
	sh := &s.shards[j]
	sh.mu.Lock()
	had := sh.a.lru.Contains(key)
	v := s.checkLocked(sh, key, seq)
	if !had && sh.a.lru.Contains(key) {
		d.add(f, j)
	}
	evs := sh.a.takePending()
	sh.mu.Unlock()
	d.mu.Unlock()
	if len(evs) != 0 {
		report(s.onEvict, evs)
	}
	return v
}

// checkLocked checks (key, seq) in sh, which the caller has locked.
func (s *Sharded) checkLocked(sh *shard, key string, seq uint64) Sighting {
	v, ok := sh.a.checkKey(key, seq)
	if !ok {
		v = s.checkFull(sh, key, seq)
	}
	return v
}

// maxCandidates bounds how many shards a new producer compares, by their
// published oldest epochs, to choose a victim when the cap is reached; with
// at most maxCandidates shards the choice covers the whole audit.
const maxCandidates = 256

// checkFull inserts key into sh (locked) when the budget is exhausted: it
// evicts the least recently used producer of whichever shard holds the
// oldest one (by insert epoch, see pickVictim) and gives its slot to key.
// It returns with sh locked; evictions of other shards are queued on sh
// for reporting.
func (s *Sharded) checkFull(sh *shard, key string, seq uint64) Sighting {
	for {
		if victim := s.pickVictim(sh); victim != nil {
			victim.a.evictOldest()
			if victim != sh {
				sh.a.pending = append(sh.a.pending, victim.a.takePending()...)
				victim.mu.Unlock()
			}
			v, used := sh.a.checkKeyToken(key, seq)
			if !used {
				s.budget.release()
			}
			return v
		}
		// sh is empty and the oldest shard was busy: take a slot from it
		// without holding sh.
		sh.mu.Unlock()
		stolen := s.steal()
		sh.mu.Lock()
		if stolen {
			v, used := sh.a.checkKeyToken(key, seq)
			if !used {
				s.budget.release()
			}
			return v
		}
		if v, ok := sh.a.checkKey(key, seq); ok {
			return v
		}
	}
}

// oldestShard returns, among up to maxCandidates shards (all of them if
// there are no more), the one whose published oldest epoch is smallest,
// or nil if they are all empty. It takes no lock: the answer may be stale.
func (s *Sharded) oldestShard() *shard {
	n := uint64(len(s.shards))
	start := uint64(0)
	if n > maxCandidates {
		// A random window: consecutive windows must not overlap, or the
		// same few shards would be drained of everything but their
		// youngest producers while older ones live elsewhere.
		start = rand.Uint64N(n)
	}
	var best *shard
	bestEpoch := uint64(math.MaxUint64)
	for i := range min(n, maxCandidates) {
		o := &s.shards[(start+i)%n]
		if ep := o.a.oldest.Load(); ep < bestEpoch {
			best, bestEpoch = o, ep
		}
	}
	return best
}

// pickVictim returns the shard to evict from for a new producer of sh
// (locked by the caller): the one holding the oldest producer. A shard
// other than sh is returned locked. If that shard is busy, sh is used if
// it has a producer; nil means sh is empty and the oldest shard was busy.
func (s *Sharded) pickVictim(sh *shard) *shard {
	best := s.oldestShard()
	switch {
	case best == nil:
		return nil
	case best == sh || sh.a.oldest.Load() == best.a.oldest.Load() && sh.a.lru.Len() > 0:
		return sh // ties stay in the new producer's shard
	case best.mu.TryLock():
		if best.a.lru.Len() > 0 {
			return best
		}
		best.mu.Unlock()
	}
	if sh.a.lru.Len() > 0 {
		return sh
	}
	return nil
}

// steal evicts the least recently used producer of the shard holding the
// oldest one (waiting for its lock; the caller holds none) and keeps its
// budget slot for the caller. It reports false when every shard was empty
// (the slots are in flight with other callers).
func (s *Sharded) steal() bool {
	if o := s.oldestShard(); o != nil {
		o.mu.Lock()
		if o.a.lru.Len() > 0 {
			o.a.evictOldest()
			s.unlock(o)
			return true
		}
		o.mu.Unlock()
	}
	runtime.Gosched()
	return false
}

// IsDuplicate is Audit.IsDuplicate; only the producer's shard is locked.
func (s *Sharded) IsDuplicate(id string) bool {
	v, err := s.Check(id)
	return err == nil && v == Duplicate
}

// Rollback is Audit.Rollback; only the producer's shard is locked.
func (s *Sharded) Rollback(id string) error {
	key, seq, err := splitLimit(id, s.maxIDLength)
	if err != nil {
		s.countReject(err, false)
		return err
	}
	s.RollbackKey(key, seq)
	return nil
}

// RollbackKey is Audit.RollbackKey; only the producer's shard is locked.
func (s *Sharded) RollbackKey(key string, seq uint64) {
	sh := s.lockHolder(key)
	sh.a.RollbackKey(key, seq)
	sh.mu.Unlock()
}

// IsInOrder is Audit.IsInOrder; only the producer's shard is locked.
func (s *Sharded) IsInOrder(id string) (bool, error) {
	key, seq, err := splitLimit(id, s.maxIDLength)
	if err != nil {
		s.countReject(err, false)
		return false, err
	}
	sh := s.lockHolder(key)
	defer sh.mu.Unlock()
	e, ok := sh.a.lru.Get(key)
	if !ok {
		return true, nil
	}
	sh.a.touchShard(e)
	return e.bin.IsInOrder(seq), nil
}

// LastSeq is Audit.LastSeq; only the producer's shard is locked.
func (s *Sharded) LastSeq(key string) (uint64, bool) {
	sh := s.lockHolder(key)
	defer sh.mu.Unlock()
	return sh.a.LastSeq(key)
}

// inFlight returns the budget slots taken but not yet used by a producer.
// Called with every shard locked.
func (s *Sharded) inFlight() int64 {
	var n int64
	for i := range s.shards {
		n += int64(s.shards[i].a.lru.Len())
	}
	return s.budget.inUse.Load() - n
}

// Clear forgets every producer; the counters are kept.
func (s *Sharded) Clear() {
	s.lockDir()
	defer s.unlockDir()
	s.lockAll()
	f := s.inFlight()
	for i := range s.shards {
		s.shards[i].a.Clear()
	}
	if s.dir != nil {
		s.dir.reset()
	}
	s.budget.inUse.Store(f)
	s.unlockAll()
}

// lockDir locks the directory, if there is one, before shards are locked
// to add or remove producers.
func (s *Sharded) lockDir() {
	if s.dir != nil {
		s.dir.mu.Lock()
	}
}

func (s *Sharded) unlockDir() {
	if s.dir != nil {
		s.dir.mu.Unlock()
	}
}

// Len returns the number of producers tracked (all shards locked).
func (s *Sharded) Len() int {
	s.lockAll()
	defer s.unlockAll()
	n := 0
	for i := range s.shards {
		n += s.shards[i].a.lru.Len()
	}
	return n
}

// Depth returns the configured window depth.
func (s *Sharded) Depth() int {
	sh := &s.shards[0]
	sh.mu.Lock()
	defer sh.mu.Unlock()
	return sh.a.cfg.depth
}

// MaxProducers returns the producer cap shared by the shards.
func (s *Sharded) MaxProducers() int {
	sh := &s.shards[0]
	sh.mu.Lock()
	defer sh.mu.Unlock()
	return sh.a.cfg.maxProducers
}

// SetDepth is Audit.SetDepth on every shard, with all shards locked.
func (s *Sharded) SetDepth(d int) error {
	d, err := checkDepth(d)
	if err != nil {
		return err
	}
	s.lockAll()
	defer s.unlockAll()
	for i := range s.shards {
		if err := s.shards[i].a.setDepth(d); err != nil {
			return err
		}
	}
	return nil
}

// SetMaxProducers changes the shared cap without clearing. Shrinking
// evicts the producers with the oldest epochs (each shard's least recently
// used first) until the total fits; growing keeps every producer.
func (s *Sharded) SetMaxProducers(n int) error {
	n, err := checkMaxProducers(n)
	if err != nil {
		return err
	}
	s.lockDir()
	defer s.unlockDir()
	s.lockAll()
	defer s.unlockAll()
	s.budget.cap.Store(int64(n))
	for s.budget.inUse.Load() > int64(n) {
		var victim *Audit
		var oldest uint64
		for i := range s.shards {
			a := &s.shards[i].a
			if ep, ok := a.oldestEpoch(); ok && (victim == nil || ep < oldest) {
				victim, oldest = a, ep
			}
		}
		if victim == nil {
			break // only in-flight slots are left; their callers insert
		}
		victim.evictOldest()
		s.budget.release()
	}
	for i := range s.shards {
		s.shards[i].a.cfg.maxProducers = n
	}
	return nil
}

// Stats returns the counters summed over the shards, all locked at once so
// the snapshot is consistent.
func (s *Sharded) Stats() Stats {
	s.lockAll()
	defer s.unlockAll()
	var st Stats
	for i := range s.shards {
		st.add(s.shards[i].a.Stats())
	}
	return st
}

// MarshalBinary encodes the audit like Audit.MarshalBinary, with all
// shards locked. The shards' LRU lists are merged by epoch, so the snapshot
// lists producers least recently used first across the whole audit (ties
// between producers checked since the same insert in shard order).
func (s *Sharded) MarshalBinary() ([]byte, error) {
	s.lockAll()
	defer s.unlockAll()
	first := &s.shards[0].a
	lists := make([][]string, len(s.shards))
	count := 0
	for i := range s.shards {
		lists[i] = s.shards[i].a.lru.Keys()
		count += len(lists[i])
	}
	dst := make([]byte, 0, 16+count*(64+first.cfg.depth/8))
	dst = appendHeader(dst, first.cfg.depth, first.cfg.maxProducers, count)
	for range count {
		// k-way merge: each list is oldest first with non-decreasing epochs.
		var best int = -1
		var bestEpoch uint64
		for i, l := range lists {
			if len(l) == 0 {
				continue
			}
			e, _ := s.shards[i].a.lru.Peek(l[0])
			if best < 0 || e.order < bestEpoch {
				best, bestEpoch = i, e.order
			}
		}
		key := lists[best][0]
		lists[best] = lists[best][1:]
		e, _ := s.shards[best].a.lru.Peek(key)
		var err error
		if dst, err = appendProducer(dst, key, e); err != nil {
			return nil, err
		}
	}
	return appendCRC(dst), nil
}

// UnmarshalBinary decodes a snapshot (of any audit type) outside the
// locks, distributes its producers over the shards keeping their order
// (epochs are assigned in snapshot order), and swaps them in with all
// shards locked. On error the audit is unchanged.
func (s *Sharded) UnmarshalBinary(data []byte) error {
	sh := &s.shards[0]
	sh.mu.Lock()
	base := sh.a.cfg // the shared depth and cap, the snapshot's limits
	sh.mu.Unlock()
	base.maxIDLength, base.onEvict = s.maxIDLength, s.onEvict
	fresh, err := decode(data, base, nil)
	if err != nil {
		return err
	}
	parts := make([]*Audit, len(s.shards))
	for i := range parts {
		parts[i] = s.newShard(fresh.cfg)
	}
	s.lockDir()
	defer s.unlockDir()
	if s.dir != nil {
		s.dir.reset() // readers fall back to the lock, which is held
	}
	keys := fresh.lru.Keys()
	entries := make([]*entry, len(keys))
	for i, key := range keys {
		e, _ := fresh.lru.Peek(key)
		entries[i] = e
		h := s.hs.sample(key)
		j := int(s.shardIndex(h))
		if s.dir != nil {
			j = s.dir.place(fingerprint(h), j)
			s.dir.add(fingerprint(h), j)
		}
		parts[j].lru.Add(key, e)
	}
	s.lockAll()
	defer s.unlockAll()
	clock := s.budget.clock.Load()
	for _, e := range entries {
		clock += 2
		e.order = clock
	}
	s.budget.clock.Store(clock)
	f := s.inFlight()
	for i := range s.shards {
		s.shards[i].a.swap(parts[i])
	}
	s.budget.cap.Store(int64(fresh.cfg.maxProducers))
	s.budget.inUse.Store(f + int64(len(keys)))
	return nil
}
