package audit

import (
	"hash/maphash"
	"math/bits"
	"math/rand/v2"
)

// hasher hashes producer keys for the audit's tables. A check hashes its
// key every time, so the hash is on the hot path, and a full string hash
// (hash/maphash) costs about a third of a check: it reads every byte of a
// 35- to 60-byte key, behind two calls. Producer keys of one broker share
// long runs of bytes, but they differ somewhere in their first or last 16
// bytes: the host name begins the key and the connection, session and
// producer numbers end it ("ID:host-port-timestamp-n:conn:session:producer").
// So sample hashes only those 32 bytes and the length, with two multiplies
// mixing them with random keys, in constant time whatever the key's length.
// Keys shorter than 16 bytes are hashed whole with maphash.
//
// Keys that differ only in the middle have equal sampled hashes. That costs
// no correctness, since a table compares whole keys on a hash match, but a
// flood of such keys would pile up on one slot. A table therefore watches
// for two different keys with the same 64-bit hash (which for two random
// keys happens with probability 2^-64) and, on the first, re-hashes every
// key with full, whose maphash reads every byte (see producers.Add).
type hasher struct {
	seed maphash.Seed
	k    [3]uint64
}

// newHasher returns a hasher with a random seed and random keys.
func newHasher() hasher {
	return hasher{seed: maphash.MakeSeed(), k: [3]uint64{rand.Uint64(), rand.Uint64(), rand.Uint64()}}
}

// sample hashes the first and the last 16 bytes of s and its length.
// producers.lookup writes its body out for keys of 16 bytes or more (a
// call less per check); TestLookupHashIsSample keeps the two equal.
func (hs *hasher) sample(s string) uint64 {
	n := len(s)
	if n < 16 {
		return maphash.String(hs.seed, s)
	}
	a, b := le64(s[:8]), le64(s[8:16])
	c, d := le64(s[n-16:n-8]), le64(s[n-8:])
	// Three keys (so that a shard fits 256 bytes) are as good as four:
	// the products are equal for all keys only when {a^k0, b^k1} equals
	// {c^k2, d^k0^n}, which takes k0^k2 or k1^k2 to arrange.
	h1, l1 := bits.Mul64(a^hs.k[0], b^hs.k[1])
	h2, l2 := bits.Mul64(c^hs.k[2], d^hs.k[0]^uint64(n))
	// A last multiply mixes the two: the low bits of each product depend
	// only on the low bits of its factors, and keys differ mostly in their
	// last bytes, the high bytes of d; without it a table's slots (the
	// hash's low bits) cluster for some keys k.
	h, l := bits.Mul64(h1^l1^hs.k[1], h2^l2^hs.k[2])
	return h ^ l
}

// full hashes every byte of s.
func (hs *hasher) full(s string) uint64 { return maphash.String(hs.seed, s) }

// le64 reads the first 8 bytes of b as a little-endian word (one load).
func le64(b string) uint64 {
	_ = b[7]
	return uint64(b[0]) | uint64(b[1])<<8 | uint64(b[2])<<16 | uint64(b[3])<<24 |
		uint64(b[4])<<32 | uint64(b[5])<<40 | uint64(b[6])<<48 | uint64(b[7])<<56
}
