package connaudit

import (
	"sync"
	"sync/atomic"
)

// table maps a destination key to its audit with lock-free lookups: the map
// is copy-on-write, published through an atomic pointer, so checks on
// different destinations never touch a shared lock (apache/activemq #2187).
// Inserts and removals take mu and copy the map, O(entries); they happen
// once per destination (or consumer subscription), not per message.
//
// The map is an LRU by epochs: the k-th insert stamps its slot 2k, a lookup
// after it stamps its slot 2k+1 (writing only when the stamp changes, so
// busy destinations do not bounce a cache line), and an insert into a full
// table evicts the slot with the oldest stamp (an O(entries) scan). Slots
// used since the same insert tie.
type table[K comparable] struct {
	m     atomic.Pointer[map[K]*slot]
	epoch atomic.Uint64
	mu    sync.Mutex // serialises writers
	cap   int        // guarded by mu
}

// slot is one audit in a table.
type slot struct {
	au   auditor
	used atomic.Uint64
}

func (s *slot) touch(epoch uint64) {
	if s.used.Load() != epoch {
		s.used.Store(epoch)
	}
}

func newTable[K comparable](capacity int) *table[K] {
	t := &table[K]{cap: capacity}
	m := make(map[K]*slot)
	t.m.Store(&m)
	return t
}

// lookup returns the audit of k, or nil.
func (t *table[K]) lookup(k K) auditor {
	if s, ok := (*t.m.Load())[k]; ok {
		s.touch(t.epoch.Load() | 1)
		return s.au
	}
	return nil
}

// getOrCreate returns the audit of k, creating it with create (called under
// mu, so configuration changes made under mu apply to it) and evicting the
// least recently used audit when the table is full. The evicted audit is
// returned so the caller can account for it.
func (t *table[K]) getOrCreate(k K, clone func(K) K, create func() auditor) (au, evicted auditor) {
	if au := t.lookup(k); au != nil {
		return au, nil
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	old := *t.m.Load()
	if s, ok := old[k]; ok { // created meanwhile
		return s.au, nil
	}
	var victimSlot *slot
	if len(old) >= t.cap {
		for _, s := range old {
			if victimSlot == nil || s.used.Load() < victimSlot.used.Load() {
				victimSlot = s
			}
		}
	}
	m := make(map[K]*slot, len(old)+1)
	for key, s := range old {
		if s != victimSlot {
			m[key] = s
		}
	}
	e := t.epoch.Add(2)
	s := &slot{au: create()}
	s.used.Store(e)
	m[clone(k)] = s
	t.m.Store(&m)
	if victimSlot != nil {
		return s.au, victimSlot.au
	}
	return s.au, nil
}

// removeIf drops every entry whose key matches and returns their audits.
func (t *table[K]) removeIf(match func(K) bool) []auditor {
	t.mu.Lock()
	defer t.mu.Unlock()
	old := *t.m.Load()
	var gone []auditor
	m := make(map[K]*slot, len(old))
	for k, s := range old {
		if match(k) {
			gone = append(gone, s.au)
		} else {
			m[k] = s
		}
	}
	if len(gone) != 0 {
		t.m.Store(&m)
	}
	return gone
}

// all returns the current audits (a consistent view of the map at one
// instant).
func (t *table[K]) all() map[K]*slot { return *t.m.Load() }
