package audit

import (
	"fmt"
	"hash/maphash"
	"runtime"
	"sync"
)

// MaxShards is the largest shard count NewSharded accepts.
const MaxShards = 4096

// shard is one independently locked Audit, padded so that two shards
// never share a cache line (their counters are written on every check).
type shard struct {
	_  [64]byte
	mu sync.Mutex
	a  *Audit
	_  [64]byte
}

// Sharded is a message audit safe for concurrent use that scales with
// cores: producers are hashed over independently locked shards, so checks
// of producers in different shards run in parallel. Every method locks the
// shard(s) it touches; methods about the whole audit (Len, Stats, Clear,
// SetDepth, SetMaxProducers, snapshots) lock all shards, in order.
//
// The producer cap is shared by all shards (the total never exceeds it),
// so evictions happen exactly when they would in Locked. What differs is
// which producer is evicted: the least recently used producer of the new
// producer's shard rather than of the whole audit (or, if that shard has
// none, the least recently used of the first non-empty shard). Likewise a
// shrinking SetMaxProducers keeps the most recently used producers of each
// shard, evicting from the largest shards first; "recent" in
// Options.OnEvict is judged against the shard's own checks. Checks,
// verdicts and windows are exactly those of Locked.
type Sharded struct {
	shards []shard
	seed   maphash.Seed
	budget budget
	// maxIDLength and onEvict never change after construction.
	maxIDLength int
	onEvict     func(string, bool)
}

// NewSharded returns an empty sharded audit with the given number of
// shards; 0 means a default of four shards per CPU (GOMAXPROCS), rounded
// up to a power of two, at most 256. More shards mean less lock contention
// and a coarser LRU order.
func NewSharded(o Options, shards int) (*Sharded, error) {
	cfg, err := o.config()
	if err != nil {
		return nil, err
	}
	switch {
	case shards < 0 || shards > MaxShards:
		return nil, fmt.Errorf("%w: %d shards (want 0..%d)", ErrOptions, shards, MaxShards)
	case shards == 0:
		shards = defaultShards()
	}
	s := &Sharded{
		shards:      make([]shard, shards),
		seed:        maphash.MakeSeed(),
		maxIDLength: cfg.maxIDLength,
		onEvict:     cfg.onEvict,
	}
	s.budget.cap.Store(int64(cfg.maxProducers))
	for i := range s.shards {
		s.shards[i].a = newAudit(cfg, &s.budget)
	}
	return s, nil
}

func defaultShards() int {
	n := 1
	for n < 4*runtime.GOMAXPROCS(0) && n < 256 {
		n *= 2
	}
	return n
}

func (s *Sharded) shardOf(key string) *shard {
	if len(s.shards) == 1 {
		return &s.shards[0]
	}
	return &s.shards[maphash.String(s.seed, key)%uint64(len(s.shards))]
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
func (s *Sharded) Check(id string) (Verdict, error) {
	key, seq, err := splitLimit(id, s.maxIDLength)
	if err != nil {
		s.countReject(err, true)
		return TooOld, err
	}
	return s.CheckKey(key, seq), nil
}

// CheckKey is Audit.CheckKey; only the producer's shard is locked (and, to
// make room when its shard has nothing to evict, one other shard at a time).
func (s *Sharded) CheckKey(key string, seq uint64) Verdict {
	sh := s.shardOf(key)
	sh.mu.Lock()
	v, ok := sh.a.checkKey(key, seq)
	for !ok {
		// The cap is reached and this shard has no producer to give up:
		// take a slot from another shard, without holding this lock.
		sh.mu.Unlock()
		stolen := s.steal()
		sh.mu.Lock()
		if stolen {
			var used bool
			if v, used = sh.a.checkKeyToken(key, seq); !used {
				s.budget.release()
			}
			ok = true
		} else {
			v, ok = sh.a.checkKey(key, seq)
		}
	}
	s.unlock(sh)
	return v
}

// steal evicts the least recently used producer of the first non-empty
// shard and keeps its budget slot for the caller. It reports false when
// every shard was empty (the slots are in flight with other callers).
func (s *Sharded) steal() bool {
	for i := range s.shards {
		o := &s.shards[i]
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
	sh := s.shardOf(key)
	sh.mu.Lock()
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
	sh := s.shardOf(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	e, ok := sh.a.lru.Get(key)
	if !ok {
		return true, nil
	}
	return e.bin.IsInOrder(seq), nil
}

// LastSeq is Audit.LastSeq; only the producer's shard is locked.
func (s *Sharded) LastSeq(key string) (uint64, bool) {
	sh := s.shardOf(key)
	sh.mu.Lock()
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
	s.lockAll()
	f := s.inFlight()
	for i := range s.shards {
		s.shards[i].a.Clear()
	}
	s.budget.inUse.Store(f)
	s.unlockAll()
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
// evicts the least recently used producer of the largest shard until the
// total fits; growing keeps every producer.
func (s *Sharded) SetMaxProducers(n int) error {
	n, err := checkMaxProducers(n)
	if err != nil {
		return err
	}
	s.lockAll()
	defer s.unlockAll()
	s.budget.cap.Store(int64(n))
	for s.budget.inUse.Load() > int64(n) {
		big := &s.shards[0]
		for i := range s.shards {
			if s.shards[i].a.lru.Len() > big.a.lru.Len() {
				big = &s.shards[i]
			}
		}
		if big.a.lru.Len() == 0 {
			break // only in-flight slots are left; their callers insert
		}
		big.a.evictOldest()
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
// shards locked. Producers are written shard by shard, each shard least
// recently used first.
func (s *Sharded) MarshalBinary() ([]byte, error) {
	s.lockAll()
	defer s.unlockAll()
	first := s.shards[0].a
	count := 0
	for i := range s.shards {
		count += s.shards[i].a.lru.Len()
	}
	dst := make([]byte, 0, 16+count*(64+first.cfg.depth/8))
	dst = appendHeader(dst, first.cfg.depth, first.cfg.maxProducers, count)
	for i := range s.shards {
		var err error
		if dst, err = s.shards[i].a.appendProducers(dst); err != nil {
			return nil, err
		}
	}
	return appendCRC(dst), nil
}

// UnmarshalBinary decodes a snapshot (of any audit type) outside the
// locks, distributes its producers over the shards keeping their relative
// order, and swaps them in with all shards locked. On error the audit is
// unchanged.
func (s *Sharded) UnmarshalBinary(data []byte) error {
	base := config{maxIDLength: s.maxIDLength, onEvict: s.onEvict}
	fresh, err := decode(data, base, nil)
	if err != nil {
		return err
	}
	parts := make([]*Audit, len(s.shards))
	for i := range parts {
		parts[i] = newAudit(fresh.cfg, &s.budget)
	}
	for _, key := range fresh.lru.Keys() {
		e, _ := fresh.lru.Peek(key)
		parts[maphash.String(s.seed, key)%uint64(len(parts))].lru.Add(key, e)
	}
	s.lockAll()
	defer s.unlockAll()
	f := s.inFlight()
	for i := range s.shards {
		s.shards[i].a.swap(parts[i])
	}
	s.budget.cap.Store(int64(fresh.cfg.maxProducers))
	s.budget.inUse.Store(f + int64(fresh.lru.Len()))
	return nil
}
