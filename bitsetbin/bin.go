package bitsetbin

import (
	"fmt"
	"math"
	"math/bits"

	"github.com/bits-and-blooms/bitset"
)

const (
	// DefaultDepth is the depth of a zero Bin and of New(0): ActiveMQ's
	// default audit depth.
	DefaultDepth = 2048
	// MaxDepth is the largest depth New and Resize accept (a 2 MiB ring).
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
// that has been marked: the copy would share most of its ring (use
// MarshalBinary to clone one).
type Bin struct {
	// The fields Mark reads come first, so that they share the first 64
	// bytes (one cache line when the Bin starts a line).

	// n ≤ MaxDepth/64+1 fits 32 bits.
	n    uint32 // ring size in slots, ≥ 2; 0 in the zero value (defaultWords)
	head uint32 // ring slot of word base

	anchored, hasTop, hasLast bool

	// lo is the lowest word whose history the bin has: base ≤ lo ≤ hi>>6.
	// Words in [base, lo) are zero and read as TooOld (Resize uncovered them).
	lo   uint64
	base uint64 // word number of the window's lowest word
	hi   uint64 // highest index marked since anchoring; hi>>6 ≤ base+n-1
	top  uint64 // highest set index, valid iff hasTop
	// The ring has n slots; slot head holds word number base, and word w of
	// the window lives in slot (head + w - base) mod n. Slots 0..n-2 are the
	// words of ring (a value, so no separate header is allocated) and slot
	// n-1 is spill: the one heap allocation is then exactly Depth()/8 bytes,
	// exactly a size class for the usual power-of-two depths, where n words
	// would round up to the next class (264 B to 288 B at the default
	// depth). ring is empty until the first Mark. While the bin is
	// unanchored every slot is zero. Use slot to reach slot s.
	ring  bitset.BitSet
	spill uint64
	last  uint64 // last IsInOrder index, valid iff hasLast
}

// New returns an unanchored bin whose guaranteed depth is at least depth:
// 0 means DefaultDepth; a negative depth or one above MaxDepth is ErrDepth.
// The ring is allocated by the first Mark.
func New(depth int) (*Bin, error) {
	n, err := ringWords(depth)
	if err != nil {
		return nil, err
	}
	return &Bin{n: n}, nil
}

// ringWords is ceil(depth/64)+1, the ring size that guarantees depth.
func ringWords(depth int) (uint32, error) {
	if depth == 0 {
		return defaultWords, nil
	}
	if depth < 0 || depth > MaxDepth {
		return 0, fmt.Errorf("%w: %d (want 0..%d)", ErrDepth, depth, MaxDepth)
	}
	return uint32(depth+63)/64 + 1, nil
}

// ringSize returns the ring size, fixing it to the default on a zero Bin.
func (b *Bin) ringSize() uint64 {
	if b.n == 0 {
		b.n = defaultWords
	}
	return uint64(b.n)
}

// Depth returns the guaranteed depth: with M the highest index marked,
// every index in [M-Depth(), M] is tracked exactly. It is the requested
// depth rounded up to a multiple of 64.
func (b *Bin) Depth() int {
	n := int(b.n)
	if n == 0 {
		n = defaultWords
	}
	return 64 * (n - 1)
}

// Mark records index i and reports FirstSeen if its bit was clear (it is now
// set), Duplicate if it was already set, or TooOld if i lies below the
// window (nothing is recorded). The first Mark anchors the window with i in
// its top word; a Mark above the window slides it. Mark allocates only on the
// first call (the ring) and its cost does not depend on how far it slides.
func (b *Bin) Mark(i uint64) Sighting {
	if !b.anchored {
		b.anchor(i)
		return FirstSeen
	}
	w := i >> 6
	if w < b.lo {
		return TooOld
	}
	n := uint64(b.n)
	off := w - b.base
	if off >= n {
		b.slide(w)
		off = n - 1
	}
	s := uint64(b.head) + off
	if s >= n {
		s -= n
	}
	// One load and one store on the slot's word instead of bitset.Test then
	// bitset.Set.
	p := b.slot(s)
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
	return FirstSeen
}

// slot returns ring slot s < n: a word of ring, or spill for the last slot.
// The one compare also spares Mark the bounds check.
func (b *Bin) slot(s uint64) *uint64 {
	p := &b.spill
	if words := b.ring.Words(); s < uint64(len(words)) {
		p = &words[s]
	}
	return p
}

// slotOf returns the ring slot of the word off < n words above base.
func (b *Bin) slotOf(off uint64) uint64 {
	n := uint64(b.n)
	s := uint64(b.head) + off
	if s >= n {
		s -= n
	}
	return s
}

// anchor starts the window with i in its top word (clamped at word 0).
func (b *Bin) anchor(i uint64) {
	n := b.ringSize()
	if uint64(len(b.ring.Words())) != n-1 {
		b.ring.SetBitsetFrom(make([]uint64, n-1))
	}
	w := i >> 6
	b.base = 0
	if w >= n-1 {
		b.base = w - (n - 1)
	}
	b.lo, b.head, b.hi = b.base, 0, i
	b.anchored = true
	*b.slot(w - b.base) |= 1 << (i & 63)
	b.top, b.hasTop = i, true
}

// clearSlots zeroes the ring slots [from, to), to ≤ n.
func (b *Bin) clearSlots(from, to uint64) {
	if from >= to {
		return
	}
	words := b.ring.Words()
	if to > uint64(len(words)) { // the range ends at slot n-1
		b.spill = 0
		to = uint64(len(words))
	}
	if from < to {
		clear(words[from:to])
	}
}

// slide moves the window up so that word w is its top word. It clears the
// words that enter the window: one word at a time for a short slide, the
// whole ring at once (O(n), whatever the distance) for a slide of n or more.
func (b *Bin) slide(w uint64) {
	n := uint64(b.n)
	k := w - (b.base + n - 1) // ≥ 1; w ≤ maxWord so nothing overflows
	if k >= n {
		b.clearSlots(0, n)
		b.head = 0
		b.base = w - (n - 1)
		b.lo = b.base
		return
	}
	// Clear the k oldest slots, head..head+k-1 mod n: at most two runs.
	head := uint64(b.head)
	if end := head + k; end <= n {
		b.clearSlots(head, end)
		head = end
	} else {
		b.clearSlots(head, n)
		b.clearSlots(0, end-n)
		head = end - n
	}
	if head == n {
		head = 0
	}
	b.head = uint32(head)
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
	if off >= uint64(b.n) {
		return false
	}
	return *b.slot(b.slotOf(off))&(1<<(i&63)) != 0
}

// Unmark clears index i (a rollback, so the redelivery of i reads as FirstSeen)
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
	if off >= uint64(b.n) {
		return false
	}
	p := b.slot(b.slotOf(off))
	m := uint64(1) << (i & 63)
	if *p&m == 0 {
		return false
	}
	*p &^= m
	if i == b.top {
		b.findTop()
	}
	return true
}

// findTop recomputes the highest set bit by scanning down from the top word.
func (b *Bin) findTop() {
	for off := uint64(b.n) - 1; ; off-- {
		if x := *b.slot(b.slotOf(off)); x != 0 {
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
	clear(b.ring.Words())
	*b = Bin{ring: b.ring, n: b.n} // spill and the rest are zero
}

// Resize changes the depth (0 means DefaultDepth; out of range is ErrDepth,
// and the bin is unchanged). The new window ends at the word of the highest
// index marked, or as high as the old one when clamped at index 0, so every
// recorded bit that fits in the new window is kept: growing keeps
// everything. Words uncovered below the old window read as TooOld, because
// the bin has no history for them. It costs O(old + new depth / 64).
func (b *Bin) Resize(depth int) error {
	n2w, err := ringWords(depth)
	if err != nil {
		return err
	}
	n := b.ringSize()
	n2 := uint64(n2w)
	if n2 == n {
		return nil
	}
	if !b.anchored {
		// Allocated at the size by the next Mark; every slot is zero.
		b.n, b.ring, b.spill = n2w, bitset.BitSet{}, 0
		return nil
	}
	var base2 uint64
	if hw := b.hi >> 6; hw >= n2-1 {
		base2 = hw - (n2 - 1)
	}
	// Copy the old ring (read through slot and slotOf while b.n is still
	// n) into a new one that starts at slot 0: word w goes to slot w-base2.
	dst := make([]uint64, n2-1)
	var spill uint64
	from, to := max(b.base, base2), min(b.base+n-1, base2+n2-1)
	for w := from; w <= to; w++ {
		x := *b.slot(b.slotOf(w - b.base))
		if s := w - base2; s < n2-1 {
			dst[s] = x
		} else {
			spill = x
		}
	}
	b.n = n2w
	b.ring.SetBitsetFrom(dst)
	b.spill = spill
	b.head, b.base = 0, base2
	b.lo = max(b.lo, base2)
	b.findTop()
	return nil
}
