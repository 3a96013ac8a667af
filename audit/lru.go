package audit

import (
	"cmp"
	"slices"
)

// producers is the LRU list of an audit's producers: a map from producer
// key to entry, and a doubly linked list threaded through the entries
// themselves, most recently used at the head.
//
// It replaces golang-lru's simplelru, which the audit used at first, for
// two measured reasons (see bench/README.md): simplelru keeps each value
// in a separate 80-byte list element (with an expiry time the audit never
// uses), which put the memory per producer above depth/8+256 bytes, and
// reaching the entry through that element cost one more dependent load on
// every check. The semantics are simplelru's: Get moves to the front,
// Peek does not, eviction takes the tail; the audit enforces the cap.
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
// The map is allocated by the first Add, so an empty list costs nothing. A
// producers value may be copied only while empty or when the original is
// discarded.
type producers struct {
	m          map[string]*entry
	head, tail *entry
	// lazy is true while lookups only stamp; tick is the last stamp.
	lazy bool
	tick uint64
	// strict keeps the list strict for good (a shard's list).
	strict bool
}

// newProducers returns an empty list, strict for good if strict is set.
func newProducers(strict bool) producers {
	return producers{lazy: !strict, strict: strict}
}

// Get returns the entry of key and makes it the most recently used.
func (p *producers) Get(key string) (*entry, bool) {
	e := p.m[key]
	if e == nil {
		return nil, false
	}
	if p.lazy {
		p.tick++
		e.order = p.tick
	} else if e.prev != nil { // not already the head
		p.moveToFront(e)
	}
	return e, true
}

// Peek returns the entry of key without changing its recency.
func (p *producers) Peek(key string) (*entry, bool) {
	e, ok := p.m[key]
	return e, ok
}

// Contains reports whether key is tracked, without changing its recency.
func (p *producers) Contains(key string) bool {
	_, ok := p.m[key]
	return ok
}

// Len returns the number of producers.
func (p *producers) Len() int { return len(p.m) }

// Add inserts e under key as the most recently used. key must not be
// tracked already.
func (p *producers) Add(key string, e *entry) {
	if p.m == nil {
		p.m = make(map[string]*entry)
	}
	e.key = key
	p.m[key] = e
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
	delete(p.m, e.key)
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
func (p *producers) Purge() { *p = newProducers(p.strict) }

// Keys returns the keys from the least to the most recently used.
func (p *producers) Keys() []string {
	p.sort()
	keys := make([]string, 0, len(p.m))
	for e := p.tail; e != nil; e = e.prev {
		keys = append(keys, e.key)
	}
	return keys
}

// Values returns the entries from the least to the most recently used.
func (p *producers) Values() []*entry {
	p.sort()
	es := make([]*entry, 0, len(p.m))
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
	if !p.lazy || len(p.m) < 2 {
		return
	}
	es := make([]*entry, 0, len(p.m))
	for e := p.head; e != nil; e = e.next {
		es = append(es, e)
	}
	slices.SortFunc(es, func(x, y *entry) int { return cmp.Compare(y.order, x.order) })
	p.head, p.tail = nil, nil
	for i := len(es) - 1; i >= 0; i-- {
		p.pushFront(es[i])
	}
}
