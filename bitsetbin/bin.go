package bitsetbin

import (
	"fmt"
	"math"
	"math/bits"

	"github.com/bits-and-blooms/bitset"
)

const (
	// DefaultDepth is the depth of a zero Bin and of NewBin(0): ActiveMQ's
	// default audit depth.
	DefaultDepth = 2048
	// MaxDepth is the largest depth NewBin and Resize accept (a 2 MiB ring).
	MaxDepth = 1 << 24
)

const (
	// maxWord is the highest word number: the word of math.MaxUint64.
	maxWord = math.MaxUint64 >> 6
	// defaultWords is the ring size of DefaultDepth.
	defaultWords = DefaultDepth/64 + 1
)

// Bin is a sliding window of bits over the uint64 sequence numbers of one
// producer. The zero value is an unanchored bin of DefaultDepth. A Bin is not
// safe for concurrent use; see the package documentation. Do not copy a Bin
// that has been marked: the copy would share its ring (use MarshalBinary to
// clone one).
type Bin struct {
	// ring holds n words; slot head holds word number base, and word w of
	// the window lives in slot (head + w - base) mod n. nil until the first
	// Mark. While the bin is unanchored every ring word is zero.
	ring *bitset.BitSet
	// words is ring.Words(): the same backing array, cached for the hot path.
	words []uint64
	n     uint64 // ring size in words, ≥ 2; 0 in the zero value (defaultWords)
	head  uint64 // ring slot of word base
	base  uint64 // word number of the window's lowest word
	// lo is the lowest word whose history the bin has: base ≤ lo ≤ hi>>6.
	// Words in [base, lo) are zero and read as TooOld (Resize uncovered them).
	lo   uint64
	hi   uint64 // highest index marked since anchoring; hi>>6 ≤ base+n-1
	top  uint64 // highest set index, valid iff hasTop
	last uint64 // last IsInOrder index, valid iff hasLast

	anchored, hasTop, hasLast bool
}

// NewBin returns an unanchored bin whose guaranteed depth is at least depth:
// 0 means DefaultDepth; a negative depth or one above MaxDepth is ErrDepth.
// The ring is allocated by the first Mark.
func NewBin(depth int) (*Bin, error) {
	n, err := ringWords(depth)
	if err != nil {
		return nil, err
	}
	return &Bin{n: n}, nil
}

// ringWords is ceil(depth/64)+1, the ring size that guarantees depth.
func ringWords(depth int) (uint64, error) {
	if depth == 0 {
		return defaultWords, nil
	}
	if depth < 0 || depth > MaxDepth {
		return 0, fmt.Errorf("%w: %d (want 0..%d)", ErrDepth, depth, MaxDepth)
	}
	return uint64(depth+63)/64 + 1, nil
}

// ringSize returns the ring size, fixing it to the default on a zero Bin.
func (b *Bin) ringSize() uint64 {
	if b.n == 0 {
		b.n = defaultWords
	}
	return b.n
}

// Depth returns the guaranteed depth: with M the highest index marked,
// every index in [M-Depth(), M] is tracked exactly. It is the requested
// depth rounded up to a multiple of 64.
func (b *Bin) Depth() int {
	n := b.n
	if n == 0 {
		n = defaultWords
	}
	return int(64 * (n - 1))
}

// Mark records index i and reports New if its bit was clear (it is now
// set), Duplicate if it was already set, or TooOld if i lies below the
// window (nothing is recorded). The first Mark anchors the window with i in
// its top word; a Mark above the window slides it. Mark allocates only on the
// first call (the ring) and its cost does not depend on how far it slides.
func (b *Bin) Mark(i uint64) Verdict {
	if !b.anchored {
		b.anchor(i)
		return New
	}
	w := i >> 6
	if w < b.lo {
		return TooOld
	}
	off := w - b.base
	if off >= b.n {
		b.slide(w)
		off = b.n - 1
	}
	s := b.head + off
	if s >= b.n {
		s -= b.n
	}
	// One load and one store on the ring's word (the bitset's own storage,
	// see words) instead of bitset.Test then bitset.Set.
	p := &b.words[s]
	m := uint64(1) << (i & 63)
	if *p&m != 0 {
		return Duplicate
	}
	*p |= m
	if i > b.hi {
		b.hi = i
	}
	if !b.hasTop || i > b.top {
		b.top, b.hasTop = i, true
	}
	return New
}

// bit returns the ring bit of index i, whose word is off words above base.
func (b *Bin) bit(off, i uint64) uint {
	s := b.head + off
	if s >= b.n {
		s -= b.n
	}
	// s < n ≤ MaxDepth/64+2, so s<<6 fits any uint.
	return uint(s<<6 | i&63)
}

// anchor starts the window with i in its top word (clamped at word 0).
func (b *Bin) anchor(i uint64) {
	n := b.ringSize()
	if b.ring == nil || uint64(len(b.words)) != n {
		b.setRing(bitset.From(make([]uint64, n)))
	}
	w := i >> 6
	b.base = 0
	if w >= n-1 {
		b.base = w - (n - 1)
	}
	b.lo, b.head, b.hi = b.base, 0, i
	b.anchored = true
	b.ring.Set(b.bit(w-b.base, i))
	b.top, b.hasTop = i, true
}

// setRing installs r as the ring storage.
func (b *Bin) setRing(r *bitset.BitSet) {
	b.ring = r
	b.words = nil
	if r != nil {
		b.words = r.Words()
	}
}

// slide moves the window up so that word w is its top word. It clears the
// words that enter the window: one word at a time for a short slide, the
// whole ring at once (O(n), whatever the distance) for a slide of n or more.
func (b *Bin) slide(w uint64) {
	k := w - (b.base + b.n - 1) // ≥ 1; w ≤ maxWord so nothing overflows
	if k >= b.n {
		b.ring.ClearAll()
		b.head = 0
		b.base = w - (b.n - 1)
		b.lo = b.base
		return
	}
	// Clear the k oldest slots, head..head+k-1 mod n: at most two runs.
	if end := b.head + k; end <= b.n {
		clear(b.words[b.head:end])
		b.head = end
	} else {
		clear(b.words[b.head:])
		clear(b.words[:end-b.n])
		b.head = end - b.n
	}
	if b.head == b.n {
		b.head = 0
	}
	b.base += k
	if b.lo < b.base {
		b.lo = b.base
	}
}

// Set is ActiveMQ's setBit(i, true) (BitArrayBin, used by isDuplicate): it
// marks i and returns the previous bit. An index below the window reports
// false (not set), so a caller that treats true as "duplicate" fails open,
// as ActiveMQ does. Use Mark to tell TooOld apart.
func (b *Bin) Set(i uint64) bool {
	return b.Mark(i) == Duplicate
}

// Get reports whether index i is set. It is a pure read: it never anchors,
// slides or allocates. An index below the window reports true (ActiveMQ's
// "gone past range, assume set"); one above the window, or any index of an
// unanchored bin, reports false.
func (b *Bin) Get(i uint64) bool {
	if !b.anchored {
		return false
	}
	w := i >> 6
	if w < b.lo {
		return true
	}
	off := w - b.base
	if off >= b.n {
		return false
	}
	return b.ring.Test(b.bit(off, i))
}

// Unmark clears index i (a rollback, so the redelivery of i reads as New)
// and returns whether it was set. An index outside the window, or any index
// of an unanchored bin, is a no-op returning false: Unmark never anchors,
// slides or allocates. Clearing the highest set bit costs O(Depth()/64) to
// find the next one; anything else is O(1).
func (b *Bin) Unmark(i uint64) bool {
	if !b.anchored {
		return false
	}
	w := i >> 6
	if w < b.lo {
		return false
	}
	off := w - b.base
	if off >= b.n {
		return false
	}
	bit := b.bit(off, i)
	if !b.ring.Test(bit) {
		return false
	}
	b.ring.Clear(bit)
	if i == b.top {
		b.findTop()
	}
	return true
}

// findTop recomputes the highest set bit by scanning down from the top word.
func (b *Bin) findTop() {
	for off := b.n - 1; ; off-- {
		if x := b.words[(b.head+off)%b.n]; x != 0 {
			b.top = (b.base+off)<<6 | uint64(63-bits.LeadingZeros64(x))
			b.hasTop = true
			return
		}
		if off == 0 {
			break
		}
	}
	b.top, b.hasTop = 0, false
}

// IsInOrder reports whether i directly follows the index of the previous
// IsInOrder call (the first call ever reports true), then records i. It
// ignores the bits, like ActiveMQ's isInOrder.
func (b *Bin) IsInOrder(i uint64) bool {
	ok := !b.hasLast || (b.last != math.MaxUint64 && i == b.last+1)
	b.last, b.hasLast = i, true
	return ok
}

// LastSetIndex returns the highest index whose bit is currently set, and
// false if no bit is set. Unlike ActiveMQ's getLastSetIndex it counts
// neither cleared bits nor words touched by reads.
func (b *Bin) LastSetIndex() (uint64, bool) {
	return b.top, b.hasTop
}

// Reset returns the bin to the unanchored state (keeping its depth and its
// ring memory) and forgets the IsInOrder record. It costs O(Depth()/64).
func (b *Bin) Reset() {
	if b.ring != nil {
		b.ring.ClearAll()
	}
	n := b.n
	*b = Bin{ring: b.ring, words: b.words, n: n}
}

// Resize changes the depth (0 means DefaultDepth; out of range is ErrDepth,
// and the bin is unchanged). The new window ends at the word of the highest
// index marked, or as high as the old one when clamped at index 0, so every
// recorded bit that fits in the new window is kept: growing keeps
// everything. Words uncovered below the old window read as TooOld, because
// the bin has no history for them. It costs O(old + new depth / 64).
func (b *Bin) Resize(depth int) error {
	n2, err := ringWords(depth)
	if err != nil {
		return err
	}
	n := b.ringSize()
	if n2 == n {
		return nil
	}
	b.n = n2
	if !b.anchored {
		b.setRing(nil) // allocated at the size by the next Mark
		return nil
	}
	var base2 uint64
	if hw := b.hi >> 6; hw >= n2-1 {
		base2 = hw - (n2 - 1)
	}
	src := b.words
	dst := make([]uint64, n2)
	from, to := max(b.base, base2), min(b.base+n-1, base2+n2-1)
	for w := from; w <= to; w++ {
		dst[w-base2] = src[(b.head+w-b.base)%n]
	}
	b.setRing(bitset.From(dst))
	b.head, b.base = 0, base2
	b.lo = max(b.lo, base2)
	b.findTop()
	return nil
}
