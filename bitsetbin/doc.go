// Package bitsetbin is the sliding bit window behind msgaudit's duplicate
// detection: one Bin per producer, one bit per sequence number, set when the
// sequence was delivered. It ports ActiveMQ Classic's BitArrayBin onto a
// ring of github.com/bits-and-blooms/bitset words and fixes its holes;
// docs/activemq-compatibility.md in the repository lists every difference
// from ActiveMQ and the test that pins it.
//
// # Window
//
// A Bin of requested depth D keeps a ring of N = ceil(D/64)+1 64-bit words,
// a head slot, and the word number of the window's lowest word, all in
// uint64 arithmetic (no 32-bit narrowing; word numbers are at most 2^58-1,
// so nothing overflows even for indexes near math.MaxUint64). The guaranteed
// depth, Depth(), is 64·(N-1) ≥ D: with M the highest index marked, every
// index in [M-Depth(), M] is answered exactly. (ActiveMQ sizes N =
// (W+1)/64+1 and guarantees only 448 for W=500; this package guarantees
// 512.)
//
// N-1 of the ring's words are a bitset.BitSet held inside the Bin and the
// last one is a field of the Bin, so a bin's only heap allocation, made by
// its first Mark, is exactly Depth()/8 bytes: 256 bytes at the default
// depth, a size class of its own, where N words (264 bytes) would round up
// to 288. Every power-of-two depth is as exact: a size class up to
// 32 KiB, whole pages above.
//
// Marking an index above the window slides it forward by k words and
// clears those k words; if k ≥ N the ring is cleared in one O(N) pass, so the
// cost of one call never depends on the size of the jump (ActiveMQ loops
// once per word: about 6 s for a jump of 1e10).
//
// # Anchoring at the top
//
// The first Mark anchors the window so that the first index lies in its
// *top* word: the window then covers the N-1 words below it as well (clamped
// at index 0). ActiveMQ anchors the first index at the *bottom* of the window
// (rounded down to 64), so a message that arrives out of order just below
// the first one a consumer sees is never tracked — and after a failover the
// first message a consumer receives is often not the lowest outstanding one.
// Anchoring at the top tracks those arrivals at no cost: indexes above the
// first one still fit as soon as they arrive, because the window slides.
//
// # Sightings and reads
//
// Mark returns FirstSeen (bit was clear, now set), Duplicate (bit was set) or
// TooOld (below the window: nothing recorded, the bin cannot tell). The whole
// zone below the window's lowest word is TooOld, including the 63 indexes
// just below it, which ActiveMQ reads inconsistently (as not set, while
// everything lower reads as set). Words whose history the bin does
// not have (those uncovered below the window when Resize grows it) are also
// TooOld, never FirstSeen.
//
// Get and Unmark are pure with respect to the window: they never anchor,
// slide or allocate (ActiveMQ's getBit and setBit(i,false) can do all
// three: a read or a rollback above the window slides it and wipes its
// history). Get of an index below the window reports true ("gone past range,
// assume set", as ActiveMQ's getBit does); above the window, or on an
// unanchored bin, false. Set is ActiveMQ's setBit(i,true): it returns the
// previous bit and reports TooOld as false, so ActiveMQ's isDuplicate fails
// open. LastSetIndex is the true highest set bit.
//
// # Snapshot format
//
// AppendBinary/MarshalBinary write version 1, all integers unsigned varints
// except the words:
//
//	byte     version (1)
//	byte     flags: 1 = anchored, 2 = has an IsInOrder record
//	uvarint  N-1 (Depth()/64), 1 ≤ N-1 ≤ MaxDepth/64
//	if anchored:
//	  uvarint  base: word number of the window's lowest word
//	  uvarint  lo-base: words at the bottom whose history is unknown
//	  uvarint  hi: highest index marked
//	  N × 8 bytes: the window's words, lowest first, little-endian
//	if IsInOrder record: uvarint last index
//
// That is Depth()/8 + about 30 bytes for an anchored bin and 3 bytes for an
// unanchored one. DecodeFrom reads one bin from the front of a byte slice and
// reports how many bytes it used, so a container (the audit snapshot) can
// concatenate bins; UnmarshalBinary requires the slice to hold exactly one
// bin. Decoding checks every length against the bytes present before
// allocating (the ring it allocates is never larger than the input), checks
// every invariant, and leaves the receiver unchanged on error.
//
// # Naming
//
// Mark's answer is a Sighting (FirstSeen, Duplicate or TooOld), not a
// "verdict": that word is the receiver's (Accept, Reject, Defer). The
// constructor is New(depth int) (*Bin, error). The audit package
// re-exports the type and its constants as audit.Sighting, audit.FirstSeen,
// audit.Duplicate and audit.TooOld.
//
// # Concurrency
//
// A Bin is not safe for concurrent use: it is the unsynchronized core that
// msgaudit's audit types lock (or shard) around. Get, LastSetIndex and Depth
// only read, so they may run concurrently with each other; every other method
// must be serialised with everything else by the caller. The zero value is an unanchored bin of
// DefaultDepth, ready to use.
package bitsetbin
