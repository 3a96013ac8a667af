package audit

import (
	"cmp"
	"math/bits"
	"slices"
	"unsafe"
)

// producers is the LRU list of an audit's producers: a hash table from
// producer key to entry, and a doubly linked list threaded through the
// entries themselves, most recently used at the head.
//
// It replaces golang-lru's simplelru, which the audit used at first:
// simplelru keeps each value in a separate 80-byte list element (with an
// expiry time the audit never uses) behind a Go map of 24-byte slots, which
// put the memory per producer above depth/8+256 bytes (BenchmarkMemory in
// cmd/msgaudit/internal/bench/), and the lookup and the element cost a cache line each on every
// check. The semantics are simplelru's: Get moves to the front,
// Peek does not, eviction takes the tail; the audit enforces the cap.
//
// The table is open addressing with linear probing over 16-byte slots (the
// key's hash and its entry), at most half full, so a lookup reads one
// line of slots, compares hashes there and touches an entry only on a hash
// match. The hash reads only a key's first and last 16 bytes and its length,
// with random keys of the table's own, until two keys collide; then the
// table re-hashes with hash/maphash, which reads every byte (hasher, in
// hash.go). Deletion shifts the following slots back, so there are no
// tombstones.
//
// Moving an entry to the front on every lookup is the most expensive part
// of an LRU, and its order matters only when a producer must be evicted.
// So a list starts lazy: a lookup only stamps the entry with a tick of a
// counter (entry.order), and the list is put in stamp order when an order is
// asked for (Keys, Values, GetOldest: O(n log n), rare). The first
// RemoveOldest (the cap was reached) makes the list strict: from then on a
// lookup moves the entry to the front, as simplelru does. Verdicts and the
// eviction order are the same in both modes; an audit that never reaches its
// cap never pays for the moves. The lists of a Sharded audit's shards are
// strict from the start, because their tails are published as epochs.
//
// The table is allocated by the first Add, so an empty list costs nothing. A
// producers value may be copied only while empty or when the original is
// discarded.
//
// The fields are packed so that a shard of a Sharded audit (a mutex and an
// Audit) fits 256 bytes.
type producers struct {
	slots      []slot // len 0 or a power of two ≥ minSlots
	hs         hasher
	head, tail *entry
	tick       uint64 // the last stamp of a lazy list
	n          uint32 // ≤ MaxProducersLimit
	// lazy is true while lookups only stamp.
	lazy bool
	// strict keeps the list strict for good (a shard's list).
	strict bool
	// full is set once two keys had the same sampled hash: from then on
	// the table hashes whole keys (see hasher).
	full bool
}

// slot is one table slot: e is nil when the slot is free.
type slot struct {
	h uint64
	e *entry
}

// minSlots is the size of a new table.
const minSlots = 8

// newProducers returns an empty list, strict for good if strict is set.
func newProducers(strict bool) producers {
	return producers{hs: newHasher(), lazy: !strict, strict: strict}
}

// find returns the entry of key, or nil.
func (p *producers) find(key string) *entry { return p.lookup(key, 0, false, false) }

// hash returns the hash of key that the table files it under.
func (p *producers) hash(key string) uint64 {
	if p.full {
		return p.hs.full(key)
	}
	return p.hs.sample(key)
}

// lookup returns the entry of key, or nil, and if use is set makes it the
// most recently used. If sampled is set, h is key's sampled hash
// (hasher.sample); otherwise lookup hashes key itself.
//
// It is the whole lookup of a check, so it is written out in one function:
// the sampled hash, the probe and the key compare, which would otherwise
// be three calls (none of them is small enough for the compiler to
// inline), and which cost 10 to 15% of a check. The compare reads the
// entry's key in the entry itself (entry.kb), without loading its pointer
// first, with up to six overlapping word compares for keys of 16 to 48
// bytes (OpenWire producer keys are 35 to 48 as a rule); other keys are
// compared with ==.
func (p *producers) lookup(key string, h uint64, sampled, use bool) *entry {
	if p.n == 0 {
		return nil
	}
	n := len(key)
	switch {
	case p.full:
		h = p.hs.full(key)
	case sampled:
	case n >= 16: // hasher.sample, written out
		k := &p.hs.k
		h1, l1 := bits.Mul64(le64(key[:8])^k[0], le64(key[8:16])^k[1])
		h2, l2 := bits.Mul64(le64(key[n-16:n-8])^k[2], le64(key[n-8:])^k[0]^uint64(n))
		hi, lo := bits.Mul64(h1^l1^k[1], h2^l2^k[2])
		h = hi ^ lo
	default:
		h = p.hs.sample(key)
	}
	mask := uint64(len(p.slots) - 1)
	for i := h & mask; ; i = (i + 1) & mask {
		s := &p.slots[i]
		e := s.e
		if e == nil {
			return nil
		}
		if s.h != h || len(e.key) != n {
			continue
		}
		if n < 16 || n > len(e.kb) { // the key is not in kb
			if e.key != key {
				continue
			}
		} else {
			// [0, 16) and [n-16, n); for n > 32 also [16, 24) and
			// [n-24, n-16), which cover [16, n-16) since n-24 ≤ 24.
			// (^ and | bind alike in Go: the parentheses are needed.)
			a := unsafe.String(&e.kb[0], len(e.kb))
			x := (le64(a[:8]) ^ le64(key[:8])) | (le64(a[8:16]) ^ le64(key[8:16])) |
				(le64(a[n-16:n-8]) ^ le64(key[n-16:n-8])) | (le64(a[n-8:n]) ^ le64(key[n-8:]))
			if n > 32 {
				x |= (le64(a[16:24]) ^ le64(key[16:24])) | (le64(a[n-24:n-16]) ^ le64(key[n-24:n-16]))
			}
			if x != 0 {
				continue
			}
		}
		if use {
			p.use(e)
		}
		return e
	}
}

// Get returns the entry of key and makes it the most recently used.
func (p *producers) Get(key string) (*entry, bool) {
	e := p.lookup(key, 0, false, true)
	return e, e != nil
}

// GetHashed is Get for a key whose sampled hash is h (a Sharded audit
// hashes a key once to pick the shard and to look it up; its shards share
// its hasher).
func (p *producers) GetHashed(key string, h uint64) (*entry, bool) {
	e := p.lookup(key, h, true, true)
	return e, e != nil
}

// use makes e, just looked up, the most recently used: a stamp in a lazy
// list, a move to the front in a strict one.
func (p *producers) use(e *entry) {
	if p.lazy {
		p.tick++
		e.order = p.tick
	} else if p.head != e { // not already the head
		p.moveToFront(e)
	}
}

// Peek returns the entry of key without changing its recency.
func (p *producers) Peek(key string) (*entry, bool) {
	e := p.find(key)
	return e, e != nil
}

// Contains reports whether key is tracked, without changing its recency.
func (p *producers) Contains(key string) bool { return p.find(key) != nil }

// Len returns the number of producers.
func (p *producers) Len() int { return int(p.n) }

// Add inserts e under key as the most recently used. key must not be
// tracked already. The entry keeps a copy of key (entry.setKey).
func (p *producers) Add(key string, e *entry) {
	if 2*(int(p.n)+1) > len(p.slots) {
		p.grow()
	}
	key = e.setKey(key)
	if p.insert(p.hash(key), e) && !p.full {
		// Two keys with the same sampled hash: from now on hash whole
		// keys, so that keys made to collide cannot pile up.
		p.full = true
		old := p.slots
		p.slots = make([]slot, len(old))
		for _, s := range old {
			if s.e != nil {
				p.insert(p.hs.full(s.e.key), s.e)
			}
		}
	}
	p.n++
	if p.lazy {
		p.tick++
		e.order = p.tick
	}
	p.pushFront(e)
}

// GetOldest returns the least recently used entry.
func (p *producers) GetOldest() (*entry, bool) {
	p.sort()
	return p.tail, p.tail != nil
}

// RemoveOldest unlinks and returns the least recently used entry.
func (p *producers) RemoveOldest() (*entry, bool) {
	p.sort()
	p.lazy = false // an evicting list keeps its order on every lookup
	e := p.tail
	if e == nil {
		return nil, false
	}
	p.delete(e)
	p.tail = e.prev
	if p.tail != nil {
		p.tail.next = nil
	} else {
		p.head = nil
	}
	e.prev, e.next = nil, nil
	return e, true
}

// Purge forgets every producer.
func (p *producers) Purge() {
	*p = producers{hs: p.hs, lazy: !p.strict, strict: p.strict}
}

// Keys returns the keys from the least to the most recently used.
func (p *producers) Keys() []string {
	p.sort()
	keys := make([]string, 0, int(p.n))
	for e := p.tail; e != nil; e = e.prev {
		keys = append(keys, e.key)
	}
	return keys
}

// Values returns the entries from the least to the most recently used.
func (p *producers) Values() []*entry {
	p.sort()
	es := make([]*entry, 0, int(p.n))
	for e := p.tail; e != nil; e = e.prev {
		es = append(es, e)
	}
	return es
}

func (p *producers) pushFront(e *entry) {
	e.prev = nil
	e.next = p.head
	if p.head != nil {
		p.head.prev = e
	} else {
		p.tail = e
	}
	p.head = e
}

// moveToFront makes e, which is linked and not the head, the head.
func (p *producers) moveToFront(e *entry) {
	prev, next := e.prev, e.next
	prev.next = next
	if next != nil {
		next.prev = prev
	} else {
		p.tail = prev
	}
	e.prev = nil
	e.next = p.head
	p.head.prev = e
	p.head = e
}

// sort relinks a lazy list in stamp order, the most recent at the head.
func (p *producers) sort() {
	if !p.lazy || p.n < 2 {
		return
	}
	es := make([]*entry, 0, int(p.n))
	for e := p.head; e != nil; e = e.next {
		es = append(es, e)
	}
	slices.SortFunc(es, func(x, y *entry) int { return cmp.Compare(y.order, x.order) })
	p.head, p.tail = nil, nil
	for i := len(es) - 1; i >= 0; i-- {
		p.pushFront(es[i])
	}
}

// insert puts e, whose key hashes to h, in the first free slot from h. It
// reports whether it passed a slot with the same hash (another key's: a
// key is inserted only when absent).
func (p *producers) insert(h uint64, e *entry) (same bool) {
	mask := uint64(len(p.slots) - 1)
	i := h & mask
	for p.slots[i].e != nil {
		same = same || p.slots[i].h == h
		i = (i + 1) & mask
	}
	p.slots[i] = slot{h: h, e: e}
	return same
}

// grow doubles the table (or allocates the first one) and reinserts.
func (p *producers) grow() {
	old := p.slots
	p.slots = make([]slot, max(minSlots, 2*len(old)))
	for _, s := range old {
		if s.e != nil {
			p.insert(s.h, s.e)
		}
	}
}

// delete frees the slot of e and shifts back the slots after it that
// would otherwise be cut off from their home slot (no tombstones).
func (p *producers) delete(e *entry) {
	mask := uint64(len(p.slots) - 1)
	i := p.hash(e.key) & mask
	for p.slots[i].e != e {
		i = (i + 1) & mask
	}
	for j := (i + 1) & mask; p.slots[j].e != nil; j = (j + 1) & mask {
		// The slot at j may fill the hole at i unless its home slot lies
		// cyclically in (i, j].
		home := p.slots[j].h & mask
		if (j-home)&mask < (j-i)&mask {
			continue
		}
		p.slots[i] = p.slots[j]
		i = j
	}
	p.slots[i] = slot{}
	p.n--
}
