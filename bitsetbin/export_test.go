package bitsetbin

import (
	"fmt"
	"math/bits"
)

// CheckInvariants reports the first broken internal invariant of b, for the
// property and fuzz tests.
func (b *Bin) CheckInvariants() error {
	n := uint64(b.n)
	words := b.ring.Words()
	if n == 0 {
		if words != nil || b.spill != 0 || b.anchored || b.hasTop {
			return fmt.Errorf("zero-size bin has state")
		}
		return nil
	}
	if n < 2 || n > MaxDepth/64+1 {
		return fmt.Errorf("ring size %d", n)
	}
	if !b.anchored {
		if b.hasTop {
			return fmt.Errorf("unanchored bin has a top")
		}
		if b.spill != 0 {
			return fmt.Errorf("unanchored bin has spill bits")
		}
		for _, w := range words {
			if w != 0 {
				return fmt.Errorf("unanchored bin has bits")
			}
		}
		return nil
	}
	// Slots 0..n-2 in the ring, exactly: no spare word allocated.
	if uint64(len(words)) != n-1 || uint64(cap(words)) != n-1 || b.ring.Len() != uint((n-1)*64) {
		return fmt.Errorf("ring has %d words (cap %d, %d bits), want %d", len(words), cap(words), b.ring.Len(), n-1)
	}
	if uint64(b.head) >= n {
		return fmt.Errorf("head %d ≥ %d", b.head, n)
	}
	if b.base > maxWord-(n-1) {
		return fmt.Errorf("base %d overflows", b.base)
	}
	if !(b.base <= b.lo && b.lo <= b.hi>>6 && b.hi>>6 <= b.base+n-1) {
		return fmt.Errorf("base %d, lo %d, hi word %d, top word %d out of order", b.base, b.lo, b.hi>>6, b.base+n-1)
	}
	var top uint64
	found := false
	for off := range n {
		// The slot computed independently of slot and slotOf.
		var x uint64
		if s := (uint64(b.head) + off) % n; s < n-1 {
			x = words[s]
		} else {
			x = b.spill
		}
		if x == 0 {
			continue
		}
		if b.base+off < b.lo {
			return fmt.Errorf("bits set in unknown word %d (lo %d)", b.base+off, b.lo)
		}
		top = (b.base+off)<<6 | uint64(63-bits.LeadingZeros64(x))
		found = true
	}
	if found != b.hasTop || (found && top != b.top) {
		return fmt.Errorf("top %d/%v, cached %d/%v", top, found, b.top, b.hasTop)
	}
	if found && top > b.hi {
		return fmt.Errorf("top %d above hi %d", top, b.hi)
	}
	return nil
}

// RingWords returns the number and capacity of the words b keeps on the
// heap (0 before the first Mark), for the allocation tests.
func (b *Bin) RingWords() (n, capacity int) {
	return len(b.ring.Words()), cap(b.ring.Words())
}
