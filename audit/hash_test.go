package audit

import (
	"strings"
	"testing"
)

// TestSameKeyEveryByte compares keys of every length up to 64 with equal
// copies and with copies differing in one byte, at every position: the
// word compares must cover every byte, whatever the length.
func TestSameKeyEveryByte(t *testing.T) {
	for n := range 65 {
		a := strings.Repeat("ID:host-41234-1700000000000-1:1:1:1234567890abcdefghijklmnopqrstu", 2)[:n]
		if !sameKey(a, strings.Clone(a)) {
			t.Fatalf("len %d: a key differs from its copy", n)
		}
		for i := range n {
			b := []byte(a)
			b[i] ^= 0x20
			if sameKey(a, string(b)) {
				t.Fatalf("len %d: keys differing at byte %d compare equal", n, i)
			}
		}
		if sameKey(a, a+"x") || sameKey(a+"x", a) {
			t.Fatalf("len %d: keys of different lengths compare equal", n)
		}
	}
}

// FuzzSameKey checks sameKey against ==, on pairs that differ in one byte
// or not at all as well as on unrelated pairs.
func FuzzSameKey(f *testing.F) {
	f.Add("ID:host-41234-1700000000000-1:1:1:7", "ID:host-41234-1700000000000-1:1:1:8", 3, byte(0))
	f.Add("ID:collide-host-0001-170000000:1:1:1", "", 20, byte(1))
	f.Fuzz(func(t *testing.T, a, b string, at int, flip byte) {
		if at >= 0 && len(a) > 0 {
			c := []byte(a) // b is a, changed in at most one byte
			c[at%len(a)] ^= flip
			b = string(c)
		}
		if got, want := sameKey(a, b), a == b; got != want {
			t.Fatalf("sameKey(%q, %q) = %v", a, b, got)
		}
	})
}
