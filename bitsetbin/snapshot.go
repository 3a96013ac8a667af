package bitsetbin

import (
	"encoding/binary"
	"fmt"
	"slices"
)

// snapshotVersion is the version byte AppendBinary writes.
const snapshotVersion = 1

const (
	flagAnchored = 1 << iota
	flagLast
	flagMask = flagAnchored | flagLast
)

// AppendBinary appends the version-1 snapshot of b (see the package
// documentation for the format) to dst. It implements encoding.BinaryAppender
// and never fails.
func (b *Bin) AppendBinary(dst []byte) ([]byte, error) {
	n := uint64(b.n)
	if n == 0 {
		n = defaultWords
	}
	var flags byte
	if b.anchored {
		flags |= flagAnchored
	}
	if b.hasLast {
		flags |= flagLast
	}
	size := 2 + binary.MaxVarintLen64
	if b.anchored {
		size += 3*binary.MaxVarintLen64 + 8*int(n)
	}
	if b.hasLast {
		size += binary.MaxVarintLen64
	}
	dst = slices.Grow(dst, size)
	dst = append(dst, snapshotVersion, flags)
	dst = binary.AppendUvarint(dst, n-1)
	if b.anchored {
		dst = binary.AppendUvarint(dst, b.base)
		dst = binary.AppendUvarint(dst, b.lo-b.base)
		dst = binary.AppendUvarint(dst, b.hi)
		// The window's words, lowest first: slots head..n-1, then 0..head-1.
		s := uint64(b.head)
		for range n {
			dst = binary.LittleEndian.AppendUint64(dst, *b.slot(s))
			if s++; s == n {
				s = 0
			}
		}
	}
	if b.hasLast {
		dst = binary.AppendUvarint(dst, b.last)
	}
	return dst, nil
}

// MarshalBinary returns the version-1 snapshot of b. It never fails.
func (b *Bin) MarshalBinary() ([]byte, error) {
	return b.AppendBinary(nil)
}

// UnmarshalBinary replaces b with the bin encoded in p, which must hold
// exactly one snapshot. On error (wrapping ErrCorrupt) b is unchanged.
func (b *Bin) UnmarshalBinary(p []byte) error {
	d, n, err := decode(p)
	if err != nil {
		return err
	}
	if n != len(p) {
		return fmt.Errorf("%w: %d trailing bytes", ErrCorrupt, len(p)-n)
	}
	*b = d
	return nil
}

// DecodeFrom replaces b with the bin encoded at the front of p and returns
// the number of bytes it used; bytes after it are left for the caller, so
// snapshots of several bins can be concatenated and read back one after
// another. On error (wrapping ErrCorrupt) b is unchanged and n is 0. The
// decoder allocates at most one ring, never larger than the bytes of p it
// consumed.
func (b *Bin) DecodeFrom(p []byte) (n int, err error) {
	d, n, err := decode(p)
	if err != nil {
		return 0, err
	}
	*b = d
	return n, nil
}

// decode reads one bin from the front of p, validating every field before
// it allocates, and returns it with the bytes consumed.
func decode(p []byte) (Bin, int, error) {
	r := reader{p: p}
	version, flags := r.byte(), r.byte()
	if r.err != nil {
		return Bin{}, 0, r.err
	}
	if version != snapshotVersion {
		return Bin{}, 0, fmt.Errorf("%w: unsupported version %d", ErrCorrupt, version)
	}
	if flags&^flagMask != 0 {
		return Bin{}, 0, fmt.Errorf("%w: unknown flags %#x", ErrCorrupt, flags)
	}
	k := r.uvarint("depth")
	if r.err != nil {
		return Bin{}, 0, r.err
	}
	if k < 1 || k > MaxDepth/64 {
		return Bin{}, 0, fmt.Errorf("%w: depth %d words out of range", ErrCorrupt, k)
	}
	d := Bin{n: uint32(k + 1)} // k ≤ MaxDepth/64
	if flags&flagAnchored != 0 {
		base, lo, hi := r.uvarint("base"), r.uvarint("lo"), r.uvarint("hi")
		if r.err != nil {
			return Bin{}, 0, r.err
		}
		if base > maxWord-k {
			return Bin{}, 0, fmt.Errorf("%w: window base %d past the end of uint64", ErrCorrupt, base)
		}
		top := base + k
		if lo > k || hi>>6 < base+lo || hi>>6 > top {
			return Bin{}, 0, fmt.Errorf("%w: window fields contradict (base %d, lo %d, hi %d)", ErrCorrupt, base, lo, hi)
		}
		// Check the length before allocating: the ring is never larger
		// than the bytes that encode it.
		if need := 8 * (k + 1); uint64(r.left()) < need {
			return Bin{}, 0, fmt.Errorf("%w: %d word bytes declared, %d present", ErrCorrupt, need, r.left())
		}
		// The window's k+1 words, lowest first, go to slots 0..k (head 0):
		// k words in the ring and the last in spill.
		d.ring.SetBitsetFrom(make([]uint64, k))
		for s := range k + 1 {
			*d.slot(s) = binary.LittleEndian.Uint64(r.p[r.off:])
			r.off += 8
		}
		for s := range lo { // lo ≤ k: ring words only
			if *d.slot(s) != 0 {
				return Bin{}, 0, fmt.Errorf("%w: bits set below the known window", ErrCorrupt)
			}
		}
		d.base, d.lo, d.hi, d.anchored = base, base+lo, hi, true
		d.findTop()
		if d.hasTop && d.top > hi {
			return Bin{}, 0, fmt.Errorf("%w: bit %d set above the highest mark %d", ErrCorrupt, d.top, hi)
		}
	}
	if flags&flagLast != 0 {
		d.last, d.hasLast = r.uvarint("last"), true
		if r.err != nil {
			return Bin{}, 0, r.err
		}
	}
	return d, r.off, nil
}

// reader reads a snapshot; the first error sticks and later reads return 0.
type reader struct {
	p   []byte
	off int
	err error
}

func (r *reader) left() int { return len(r.p) - r.off }

func (r *reader) byte() byte {
	if r.err != nil {
		return 0
	}
	if r.off >= len(r.p) {
		r.err = fmt.Errorf("%w: truncated header", ErrCorrupt)
		return 0
	}
	c := r.p[r.off]
	r.off++
	return c
}

func (r *reader) uvarint(field string) uint64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Uvarint(r.p[r.off:])
	if n <= 0 {
		r.err = fmt.Errorf("%w: bad or truncated %s", ErrCorrupt, field)
		return 0
	}
	r.off += n
	return v
}
