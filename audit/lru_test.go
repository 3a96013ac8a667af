package audit

import (
	"fmt"
	"slices"
	"testing"
	"unsafe"

	"github.com/hashicorp/golang-lru/v2/simplelru"
	"pgregory.net/rapid"
)

// TestProducersModel drives the LRU list, lazy or strict, with random
// operations and compares it now and then with a slice kept least recently
// used first (not after every step: reading the order sorts a lazy list).
func TestProducersModel(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		p := newProducers(rapid.Bool().Draw(t, "strict"))
		var model []string // least recently used first
		keys := make([]string, rapid.IntRange(1, 40).Draw(t, "keys"))
		format := rapid.SampledFrom(keyFormats).Draw(t, "format")
		for i := range keys {
			keys[i] = fmt.Sprintf(format, i)
		}
		for step := range rapid.IntRange(1, 200).Draw(t, "steps") {
			key := rapid.SampledFrom(keys).Draw(t, "key")
			at := slices.Index(model, key)
			switch rapid.IntRange(0, 5).Draw(t, "op") {
			case 0, 1: // Get
				e, ok := p.Get(key)
				if ok != (at >= 0) {
					t.Fatalf("step %d: Get(%q) found %v, model %v", step, key, ok, at >= 0)
				}
				if ok {
					if e.key != key {
						t.Fatalf("step %d: Get(%q) returned the entry of %q", step, key, e.key)
					}
					model = append(slices.Delete(model, at, at+1), key)
				}
			case 2: // Peek and Contains
				e, ok := p.Peek(key)
				if ok != (at >= 0) || p.Contains(key) != ok || ok && e.key != key {
					t.Fatalf("step %d: Peek(%q) = %v, model %v", step, key, ok, at >= 0)
				}
			case 3: // Add when absent
				if at < 0 {
					p.Add(key, new(entry))
					model = append(model, key)
				}
			case 4: // RemoveOldest
				e, ok := p.RemoveOldest()
				if ok != (len(model) > 0) {
					t.Fatalf("step %d: RemoveOldest ok = %v with %d in the model", step, ok, len(model))
				}
				if ok {
					if e.key != model[0] || e.prev != nil || e.next != nil {
						t.Fatalf("step %d: RemoveOldest = %q (linked %v), want %q", step, e.key, e.prev != nil || e.next != nil, model[0])
					}
					model = model[1:]
				}
			case 5:
				if rapid.IntRange(0, 9).Draw(t, "purge") == 0 {
					p.Purge()
					model = nil
				}
			}
			if !rapid.Bool().Draw(t, "look") {
				continue
			}
			if got := p.Keys(); !slices.Equal(got, model) && !(len(got) == 0 && len(model) == 0) {
				t.Fatalf("step %d: Keys() = %q, model %q", step, got, model)
			}
			if p.Len() != len(model) {
				t.Fatalf("step %d: Len() = %d, model %d", step, p.Len(), len(model))
			}
			vals := p.Values()
			for i, e := range vals {
				if e.key != model[i] {
					t.Fatalf("step %d: Values()[%d] is %q, model %q", step, i, e.key, model[i])
				}
			}
			if o, ok := p.GetOldest(); ok != (len(model) > 0) || ok && o.key != model[0] {
				t.Fatalf("step %d: GetOldest wrong", step)
			}
			// The list read from the head must be the reverse of Keys.
			var fwd []string
			for e := p.head; e != nil; e = e.next {
				fwd = append(fwd, e.key)
			}
			slices.Reverse(fwd)
			if !slices.Equal(fwd, p.Keys()) {
				t.Fatalf("step %d: head-to-tail links %q disagree with tail-to-head %q", step, fwd, p.Keys())
			}
		}
	})
}

// keyFormats are the kinds of keys the table tests use: short keys (hashed
// whole), OpenWire keys differing at the end (sampled), and keys differing
// only in the middle, which the sampled hash does not read (they collide
// and make the table hash whole keys).
var keyFormats = []string{"k%d", "ID:host-41234-1700000000000-1:1:1:%d", "ID:collide-host-%04d-170000000:1:1:1"}

// TestSampledCollisionsHashWhole adds keys that differ only where the
// sampled hash does not look: the second one must switch the table to whole
// keys, and then the keys must spread over the table instead of piling up
// behind one slot.
func TestSampledCollisionsHashWhole(t *testing.T) {
	p := newProducers(false)
	const n = 1000
	for i := range n {
		key := fmt.Sprintf(keyFormats[2], i)
		if _, ok := p.Get(key); ok {
			t.Fatalf("%s found before it was added", key)
		}
		p.Add(key, new(entry))
		if p.full != (i > 0) {
			t.Fatalf("after %d keys the table hashes whole keys: %v", i+1, p.full)
		}
	}
	for i := range n {
		key := fmt.Sprintf(keyFormats[2], i)
		if e, ok := p.Get(key); !ok || e.key != key {
			t.Fatalf("%s not found", key)
		}
	}
	if d := p.maxDisplacement(); d > 64 {
		t.Fatalf("a key sits %d slots after its home slot: the keys pile up", d)
	}
	for range n / 2 {
		if _, ok := p.RemoveOldest(); !ok {
			t.Fatal("RemoveOldest found nothing")
		}
	}
	for i := range n {
		key := fmt.Sprintf(keyFormats[2], i)
		if _, ok := p.Peek(key); ok != (i >= n/2) {
			t.Fatalf("%s tracked = %v after the oldest half was removed", key, ok)
		}
	}
	p.Purge()
	if p.full {
		t.Fatal("Purge kept the whole-key hash")
	}
}

// TestOpenWireKeysStaySampled adds many distinct OpenWire producer keys,
// of several hosts, connections and sessions: none may make the table fall
// back to whole-key hashing, and they must spread over the table.
func TestOpenWireKeysStaySampled(t *testing.T) {
	p := newProducers(false)
	for host := range 4 {
		for conn := range 50 {
			for prod := range 500 {
				key := fmt.Sprintf("ID:broker-%d.example.com-%d-1700000000%03d-%d:%d:%d:%d",
					host, 40000+host, conn, conn%3, conn+1, prod%7+1, prod+1)
				p.Add(key, new(entry))
			}
		}
	}
	if p.full {
		t.Fatal("distinct OpenWire keys had the same sampled hash")
	}
	if d := p.maxDisplacement(); d > 64 {
		t.Fatalf("a key sits %d slots after its home slot: the sampled hash clusters", d)
	}
}

// maxDisplacement returns how far the farthest key sits from its home slot.
func (p *producers) maxDisplacement() uint64 {
	mask := uint64(len(p.slots) - 1)
	var d uint64
	for i, s := range p.slots {
		if s.e != nil {
			d = max(d, (uint64(i)-s.h)&mask)
		}
	}
	return d
}

// TestEvictionOrderMatchesSimplelru runs random checks, rollbacks, reads
// and snapshots through an Audit and, on the same keys, through golang-lru's
// simplelru (what the audit used first): both must evict the same producers
// in the same order.
func TestEvictionOrderMatchesSimplelru(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		capacity := rapid.IntRange(1, 6).Draw(t, "cap")
		var got, want []string
		a, err := New(Options{Depth: 64, MaxProducers: capacity, OnEvict: func(k string, _ bool) { got = append(got, k) }})
		if err != nil {
			t.Fatal(err)
		}
		model, err := simplelru.NewLRU[string, struct{}](capacity, func(k string, _ struct{}) { want = append(want, k) })
		if err != nil {
			t.Fatal(err)
		}
		for range rapid.IntRange(1, 300).Draw(t, "steps") {
			key := fmt.Sprintf("p%d", rapid.IntRange(0, 9).Draw(t, "producer"))
			seq := rapid.Uint64Range(1, 100).Draw(t, "seq")
			switch rapid.IntRange(0, 9).Draw(t, "op") {
			case 0: // a rollback refreshes a tracked producer
				a.RollbackKey(key, seq)
				model.Get(key)
			case 1: // IsInOrder refreshes a tracked producer
				if _, err := a.IsInOrder(key + ":" + fmt.Sprint(seq)); err != nil {
					t.Fatal(err)
				}
				model.Get(key)
			case 2: // LastSeq does not
				a.LastSeq(key)
				model.Peek(key)
			case 3: // reading the order (a snapshot) changes nothing
				if _, err := a.MarshalBinary(); err != nil {
					t.Fatal(err)
				}
			default:
				a.CheckKey(key, seq)
				if !model.Contains(key) {
					model.Add(key, struct{}{})
				} else {
					model.Get(key)
				}
			}
			if !slices.Equal(got, want) {
				t.Fatalf("evicted %q, simplelru evicted %q", got, want)
			}
			if a.Len() != model.Len() {
				t.Fatalf("%d producers, simplelru %d", a.Len(), model.Len())
			}
		}
		if k := a.lru.Keys(); !slices.Equal(k, model.Keys()) {
			t.Fatalf("order %q, simplelru %q", k, model.Keys())
		}
	})
}

// TestShardedHashOnce pins that a shard's table hashes with the Sharded
// audit's hasher, so the one hash Check computes also finds the producer
// (otherwise every check would fall back to the slow path and hash twice),
// also in a shard whose table has fallen back to whole-key hashes.
func TestShardedHashOnce(t *testing.T) {
	s, err := NewSharded(Options{}, 0)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 400 {
		key := fmt.Sprint("ID:host-1-2-3:1:1:", i)
		if i >= 200 { // then keys whose sampled hashes collide
			key = fmt.Sprintf(keyFormats[2], i)
		}
		if v := s.CheckKey(key, 1); v != FirstSeen {
			t.Fatalf("%s: %v", key, v)
		}
		h := s.hs.sample(key)
		sh := s.shardFor(h)
		if _, ok := sh.a.lru.GetHashed(key, h); !ok {
			t.Fatalf("%s: not found in the shard the directory gives for its hash", key)
		}
	}
}

// TestShardSize pins the 256 bytes an empty shard costs (NewSharded's
// doc): whole 128-byte units, so that no two shards share a cache line or
// an adjacent-line pair, and no more.
func TestShardSize(t *testing.T) {
	if unsafe.Sizeof(uintptr(0)) != 8 {
		t.Skip("the layout is tuned for 64-bit platforms")
	}
	if n := unsafe.Sizeof(shard{}); n != 256 {
		t.Fatalf("a shard is %d bytes, want 256", n)
	}
}

// TestPaddedEntrySize checks that a shard's entries are whole pairs of
// cache lines (Sharded's scaling depends on it).
func TestPaddedEntrySize(t *testing.T) {
	if n := unsafe.Sizeof(paddedEntry{}); n != paddedEntrySize || n%128 != 0 {
		t.Fatalf("a padded entry is %d bytes, want %d, a multiple of 128", n, paddedEntrySize)
	}
}

// TestSampledHashSpreads fills 1000 tables, each with its own random keys,
// with 64 OpenWire producer keys that differ in one number (at the end, in
// the middle of the sampled tail, at the start), and counts the tables
// where a lookup takes more than 2.2 probes on average. hash/maphash gives
// 2 to 6 such tables of 1000 here (1.47 probes on average); the sampled
// hash without its last multiply gave 57 to 95, its slots clustering.
func TestSampledHashSpreads(t *testing.T) {
	for _, format := range []string{
		"ID:host-41234-1700000000000-1:1:1:%d",
		"ID:host-41234-1700000000000-%d:1:1:1",
		"ID:%03d-host-41234-1700000000000-1:1:1:1",
	} {
		slow := 0
		for range 1000 {
			p := newProducers(false)
			for i := range 64 {
				p.Add(fmt.Sprintf(format, i+1), new(entry))
			}
			if p.full {
				t.Fatalf("%s: two keys had the same sampled hash", format)
			}
			mask := uint64(len(p.slots) - 1)
			probes := 0
			for i, s := range p.slots {
				if s.e != nil {
					probes += int((uint64(i)-s.h)&mask) + 1
				}
			}
			if float64(probes)/64 > 2.2 {
				slow++
			}
		}
		if slow > 25 {
			t.Errorf("%s: %d tables of 1000 take over 2.2 probes per lookup (a good hash: under 10)", format, slow)
		}
	}
}
