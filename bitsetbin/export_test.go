package bitsetbin

import (
	"fmt"
	"math/bits"
)

// CheckInvariants reports the first broken internal invariant of b, for the
// property and fuzz tests.
func (b *Bin) CheckInvariants() error {
	if b.n == 0 {
		if b.ring != nil || b.anchored || b.hasTop {
			return fmt.Errorf("zero-size bin has state")
		}
		return nil
	}
	if b.n < 2 || b.n > MaxDepth/64+1 {
		return fmt.Errorf("ring size %d", b.n)
	}
	if !b.anchored {
		if b.hasTop {
			return fmt.Errorf("unanchored bin has a top")
		}
		if b.ring != nil {
			for _, w := range b.ring.Words() {
				if w != 0 {
					return fmt.Errorf("unanchored bin has bits")
				}
			}
		}
		return nil
	}
	words := b.ring.Words()
	if len(b.words) != len(words) || (len(words) > 0 && &b.words[0] != &words[0]) {
		return fmt.Errorf("cached words are not the ring's storage")
	}
	if uint64(len(words)) != b.n || b.ring.Len() != uint(b.n*64) {
		return fmt.Errorf("ring has %d words (%d bits), want %d", len(words), b.ring.Len(), b.n)
	}
	if b.head >= b.n {
		return fmt.Errorf("head %d ≥ %d", b.head, b.n)
	}
	if b.base > maxWord-(b.n-1) {
		return fmt.Errorf("base %d overflows", b.base)
	}
	if !(b.base <= b.lo && b.lo <= b.hi>>6 && b.hi>>6 <= b.base+b.n-1) {
		return fmt.Errorf("base %d, lo %d, hi word %d, top word %d out of order", b.base, b.lo, b.hi>>6, b.base+b.n-1)
	}
	var top uint64
	found := false
	for off := range b.n {
		x := words[(b.head+off)%b.n]
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
