package audit

import (
	"sync"
	"sync/atomic"
)

// directory records which shard of a Sharded audit holds each producer, so
// that producers can be placed instead of hashed to a shard. With producers
// hashed to shards, two producers share a shard now and then (64 producers
// over 256 shards: 8 pairs on average), and when goroutines on different
// cores check two producers of one shard, every check waits for the other
// core's lock and cache lines: two goroutines then ran no faster than one
// (cmd/msgaudit/internal/bench/scaling.sh). Placed, a new producer goes to an empty shard near its
// hashed one, so while shards outnumber producers none shares a shard.
//
// Checks read the directory without a lock: a table of 64-bit fingerprints
// (the producer key's sampled hash, low bit set so that 0 means a free slot)
// and their shard numbers, in atomics. What a reader finds is only a hint:
// it locks that shard and looks the key up there; when the key is not found
// (a new producer, or a reader racing a change) it asks again under mu,
// where the answer is exact. All changes to where producers are (inserts,
// evictions, Clear, snapshots) happen under mu, so the directory and the
// shards agree whenever mu is free. Keys with equal fingerprints are
// counted in one entry and placed in one shard.
//
// Lock order: mu before any shard's lock.
type directory struct {
	mu  sync.Mutex
	tab atomic.Pointer[dirTable]
	// Under mu: entries in tab, and producers placed in each shard.
	n    int
	load []int32
}

// dirTable is an open-addressing table with linear probing, at most half
// full. A slot's shard is stored before its fingerprint and read after it.
type dirTable struct {
	fps    []atomic.Uint64
	shards []atomic.Uint32
	refs   []int32 // keys with this fingerprint; under directory.mu
}

// placeProbes is how many shards from a producer's hashed one place looks
// at for an empty one.
const placeProbes = 16

func newDirectory(shards int) *directory {
	d := &directory{load: make([]int32, shards)}
	d.tab.Store(newDirTable(16))
	return d
}

func newDirTable(size int) *dirTable {
	return &dirTable{fps: make([]atomic.Uint64, size), shards: make([]atomic.Uint32, size), refs: make([]int32, size)}
}

// fingerprint is the directory's key for a producer key of sampled hash h.
func fingerprint(h uint64) uint64 { return h | 1 }

// lookup returns the shard recorded for fingerprint f. Without mu the
// answer is a hint (see directory). It probes by itself rather than
// through find, which would take it over the inlining budget of
// Sharded.shardFor, on every check's path.
func (d *directory) lookup(f uint64) (uint32, bool) {
	t := d.tab.Load()
	mask := uint64(len(t.fps) - 1)
	i := f & mask
	for range len(t.fps) {
		switch t.fps[i].Load() {
		case 0:
			return 0, false
		case f:
			return t.shards[i].Load(), true
		}
		i = (i + 1) & mask
	}
	return 0, false
}

// find returns the slot of f in t, or -1. Under mu.
func (t *dirTable) find(f uint64) int {
	mask := uint64(len(t.fps) - 1)
	for i := f & mask; ; i = (i + 1) & mask {
		switch t.fps[i].Load() {
		case 0:
			return -1
		case f:
			return int(i)
		}
	}
}

// place returns the shard for a new producer of fingerprint f whose hashed
// shard is home: the first empty shard from home on, else the least loaded
// of those looked at. Under mu.
func (d *directory) place(f uint64, home int) int {
	if j, ok := d.lookup(f); ok {
		return int(j) // a key with the same fingerprint is there
	}
	n := len(d.load)
	best := home
	for k := range min(placeProbes, n) {
		j := (home + k) % n
		if d.load[j] == 0 {
			return j
		}
		if d.load[j] < d.load[best] {
			best = j
		}
	}
	return best
}

// add records one more producer of fingerprint f in shard j. Under mu.
func (d *directory) add(f uint64, j int) {
	d.load[j]++
	t := d.tab.Load()
	if i := t.find(f); i >= 0 {
		t.refs[i]++
		return
	}
	if 2*(d.n+1) > len(t.fps) {
		t = d.grow(t)
	}
	t.insert(f, uint32(j), 1)
	d.n++
}

// insert puts a new entry in the first free slot from f's. Under mu.
func (t *dirTable) insert(f uint64, shard uint32, refs int32) {
	mask := uint64(len(t.fps) - 1)
	i := f & mask
	for t.fps[i].Load() != 0 {
		i = (i + 1) & mask
	}
	t.shards[i].Store(shard)
	t.refs[i] = refs
	t.fps[i].Store(f)
}

// grow publishes a table twice the size of t with t's entries and returns
// it. Readers still on t see it frozen: stale hints at worst. Under mu.
func (d *directory) grow(t *dirTable) *dirTable {
	g := newDirTable(2 * len(t.fps))
	for i := range t.fps {
		if f := t.fps[i].Load(); f != 0 {
			g.insert(f, t.shards[i].Load(), t.refs[i])
		}
	}
	d.tab.Store(g)
	return g
}

// remove forgets one producer of fingerprint f (evicted from its shard).
// Under mu.
func (d *directory) remove(f uint64) {
	t := d.tab.Load()
	i := t.find(f)
	if i < 0 {
		return // unreachable while the directory and the shards agree
	}
	d.load[t.shards[i].Load()]--
	if t.refs[i]--; t.refs[i] > 0 {
		return
	}
	// Backward-shift deletion, as in producers.delete. A reader may miss an
	// entry while it moves, and then asks again under mu.
	mask := uint64(len(t.fps) - 1)
	hole := uint64(i)
	for j := (hole + 1) & mask; ; j = (j + 1) & mask {
		f := t.fps[j].Load()
		if f == 0 {
			break
		}
		if home := f & mask; (j-home)&mask < (j-hole)&mask {
			continue
		}
		t.shards[hole].Store(t.shards[j].Load())
		t.refs[hole] = t.refs[j]
		t.fps[hole].Store(f)
		hole = j
	}
	t.fps[hole].Store(0)
	d.n--
}

// reset forgets every producer. Under mu.
func (d *directory) reset() {
	clear(d.load)
	d.n = 0
	d.tab.Store(newDirTable(16))
}
