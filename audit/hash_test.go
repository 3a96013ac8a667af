package audit

import (
	"strings"
	"testing"
)

// keyMatches reports whether a table holding key a finds an entry for key
// b, with a's entry filed under b's hash: the hashes agree, so the key
// compare of lookup alone decides.
func keyMatches(a, b string) bool {
	p := newProducers(false)
	e := newEntry(64, false)
	p.Add(a, e)
	h := p.hash(b)
	clear(p.slots)
	p.slots[h&uint64(len(p.slots)-1)] = slot{h: h, e: e}
	return p.find(b) == e
}

// TestKeyCompareEveryByte compares keys of every length up to 64 with
// equal copies and with copies differing in one byte, at every position:
// lookup's word compares must cover every byte, whatever the length, for
// keys held in the entry (up to inlineKey bytes) and for longer ones.
func TestKeyCompareEveryByte(t *testing.T) {
	for n := range 65 {
		a := strings.Repeat("ID:host-41234-1700000000000-1:1:1:1234567890abcdefghijklmnopqrstu", 2)[:n]
		if !keyMatches(a, strings.Clone(a)) {
			t.Fatalf("len %d: a key differs from its copy", n)
		}
		for i := range n {
			b := []byte(a)
			b[i] ^= 0x20
			if keyMatches(a, string(b)) {
				t.Fatalf("len %d: keys differing at byte %d compare equal", n, i)
			}
		}
		if keyMatches(a, a+"x") || keyMatches(a+"x", a) {
			t.Fatalf("len %d: keys of different lengths compare equal", n)
		}
	}
}

// FuzzKeyCompare checks lookup's key compare against ==, on pairs that
// differ in one byte or not at all as well as on unrelated pairs.
func FuzzKeyCompare(f *testing.F) {
	f.Add("ID:host-41234-1700000000000-1:1:1:7", "ID:host-41234-1700000000000-1:1:1:8", 3, byte(0))
	f.Add("ID:collide-host-0001-170000000:1:1:1", "", 20, byte(1))
	f.Fuzz(func(t *testing.T, a, b string, at int, flip byte) {
		if at >= 0 && len(a) > 0 {
			c := []byte(a) // b is a, changed in at most one byte
			c[at%len(a)] ^= flip
			b = string(c)
		}
		if got, want := keyMatches(a, b), a == b; got != want {
			t.Fatalf("keys %q and %q: match %v", a, b, got)
		}
	})
}

// TestLookupHashIsSample checks that lookup's written-out hash is
// hasher.sample's: each key is filed only in the slot sample gives it, with
// sample's hash, and must be found there, for every key length up to 100.
func TestLookupHashIsSample(t *testing.T) {
	for n := 16; n <= 100; n++ {
		key := strings.Repeat("ID:host-41234-1700000000000-1:1:1:987654321", 3)[:n]
		p := newProducers(false)
		e := newEntry(64, false)
		p.Add(key, e)
		h := p.hs.sample(key)
		clear(p.slots)
		p.slots[h&uint64(len(p.slots)-1)] = slot{h: h, e: e}
		if p.find(key) != e {
			t.Fatalf("len %d: lookup does not find a key filed under its sampled hash", n)
		}
	}
}
