package bitsetbin_test

import (
	"bytes"
	"encoding"
	"encoding/binary"
	"errors"
	"math"
	"runtime"
	"testing"

	"github.com/acemq/msgaudit/bitsetbin"
)

var (
	_ encoding.BinaryMarshaler   = (*bitsetbin.Bin)(nil)
	_ encoding.BinaryUnmarshaler = (*bitsetbin.Bin)(nil)
	_ encoding.BinaryAppender    = (*bitsetbin.Bin)(nil)
)

// snapshotStates returns bins in interesting states, by name.
func snapshotStates(t testing.TB) map[string]*bitsetbin.Bin {
	t.Helper()
	mk := func(depth int, f func(b *bitsetbin.Bin)) *bitsetbin.Bin {
		b, err := bitsetbin.New(depth)
		if err != nil {
			t.Fatal(err)
		}
		f(b)
		return b
	}
	return map[string]*bitsetbin.Bin{
		"zero":       {},
		"unanchored": mk(64, func(*bitsetbin.Bin) {}),
		"inOrderOnly": mk(500, func(b *bitsetbin.Bin) {
			b.IsInOrder(41)
		}),
		"anchoredLow": mk(2048, func(b *bitsetbin.Bin) { b.Mark(5); b.Mark(2) }),
		"slid": mk(128, func(b *bitsetbin.Bin) {
			for i := uint64(0); i < 1000; i += 7 {
				b.Mark(i)
			}
			b.Unmark(994)
			b.IsInOrder(3)
		}),
		"grown": mk(64, func(b *bitsetbin.Bin) {
			for i := uint64(500); i < 700; i++ {
				b.Mark(i)
			}
			_ = b.Resize(1000)
		}),
		"rolledBackAll": mk(64, func(b *bitsetbin.Bin) { b.Mark(9); b.Unmark(9) }),
		"top": mk(2048, func(b *bitsetbin.Bin) {
			b.Mark(math.MaxUint64)
			b.Mark(math.MaxUint64 - 2000)
			b.IsInOrder(math.MaxUint64)
		}),
		"max": mk(bitsetbin.MaxDepth, func(b *bitsetbin.Bin) { b.Mark(1 << 40); b.Mark(1<<40 - 1<<23) }),
	}
}

func probes() []uint64 {
	p := []uint64{0, 1, 2, 5, 9, 63, 64, 500, 993, 994, 999, 1000, 1 << 40, 1<<40 - 1<<23, math.MaxUint64, math.MaxUint64 - 2000, math.MaxUint64 - 2112}
	for i := uint64(380); i < 720; i++ {
		p = append(p, i)
	}
	return p
}

func TestSnapshotRoundTrip(t *testing.T) {
	t.Parallel()
	for name, b := range snapshotStates(t) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			p := snapshot(t, b)
			var c bitsetbin.Bin
			if err := c.UnmarshalBinary(p); err != nil {
				t.Fatal(err)
			}
			if err := c.CheckInvariants(); err != nil {
				t.Fatal(err)
			}
			if q := snapshot(t, &c); !bytes.Equal(p, q) {
				t.Fatalf("re-encoding differs:\n%x\n%x", p, q)
			}
			if b.Depth() != c.Depth() {
				t.Fatalf("Depth %d != %d", b.Depth(), c.Depth())
			}
			bl, bok := b.LastSetIndex()
			cl, cok := c.LastSetIndex()
			if bl != cl || bok != cok {
				t.Fatalf("LastSetIndex %d,%v != %d,%v", bl, bok, cl, cok)
			}
			for _, i := range probes() {
				if b.Get(i) != c.Get(i) {
					t.Fatalf("Get(%d) differs", i)
				}
			}
			// Both behave alike from here on.
			for _, i := range probes() {
				if vb, vc := b.Mark(i), c.Mark(i); vb != vc {
					t.Fatalf("Mark(%d) = %v on the original, %v on the copy", i, vb, vc)
				}
				if b.IsInOrder(i) != c.IsInOrder(i) {
					t.Fatalf("IsInOrder(%d) differs", i)
				}
			}
		})
	}
}

// TestSnapshotSize: an anchored bin takes about depth/8 bytes, an
// unanchored one a few.
func TestSnapshotSize(t *testing.T) {
	t.Parallel()
	for _, d := range []int{64, 500, 2048, 65536} {
		b := newBin(t, d)
		if n := len(snapshot(t, b)); n > 4 {
			t.Errorf("depth %d unanchored: %d bytes", d, n)
		}
		b.Mark(1 << 50)
		b.IsInOrder(1 << 50)
		if n, max := len(snapshot(t, b)), b.Depth()/8+8+40; n > max {
			t.Errorf("depth %d anchored: %d bytes, want ≤ %d", d, n, max)
		}
	}
}

func TestSnapshotTruncatedAndTrailing(t *testing.T) {
	t.Parallel()
	for name, b := range snapshotStates(t) {
		if name == "max" {
			continue // 2 MiB: every prefix would take long
		}
		p := snapshot(t, b)
		victim := newBin(t, 128)
		victim.Mark(12345)
		victim.IsInOrder(8)
		before := snapshot(t, victim)
		for n := 0; n < len(p); n++ {
			err := victim.UnmarshalBinary(p[:n])
			if !errors.Is(err, bitsetbin.ErrCorrupt) {
				t.Fatalf("%s: UnmarshalBinary of %d/%d bytes: err = %v", name, n, len(p), err)
			}
			if used, err := victim.DecodeFrom(p[:n]); !errors.Is(err, bitsetbin.ErrCorrupt) || used != 0 {
				t.Fatalf("%s: DecodeFrom of %d/%d bytes = %d, %v", name, n, len(p), used, err)
			}
		}
		if err := victim.UnmarshalBinary(append(p, 0)); !errors.Is(err, bitsetbin.ErrCorrupt) {
			t.Fatalf("%s: trailing byte: err = %v", name, err)
		}
		if !bytes.Equal(before, snapshot(t, victim)) {
			t.Fatalf("%s: a failed decode changed the receiver", name)
		}
	}
}

func TestDecodeFromConcatenated(t *testing.T) {
	t.Parallel()
	states := snapshotStates(t)
	names := []string{"slid", "zero", "top", "grown", "inOrderOnly"}
	var buf []byte
	var err error
	for _, n := range names {
		if buf, err = states[n].AppendBinary(buf); err != nil {
			t.Fatal(err)
		}
	}
	buf = append(buf, "tail"...)
	for _, n := range names {
		var c bitsetbin.Bin
		used, err := c.DecodeFrom(buf)
		if err != nil {
			t.Fatalf("%s: %v", n, err)
		}
		if !bytes.Equal(snapshot(t, &c), snapshot(t, states[n])) {
			t.Fatalf("%s decoded differently", n)
		}
		buf = buf[used:]
	}
	if string(buf) != "tail" {
		t.Fatalf("left %q", buf)
	}
}

// enc builds a version-1 snapshot by hand.
type enc struct{ p []byte }

func (e *enc) b(c ...byte) *enc { e.p = append(e.p, c...); return e }
func (e *enc) u(v uint64) *enc  { e.p = binary.AppendUvarint(e.p, v); return e }
func (e *enc) w(v uint64) *enc  { e.p = binary.LittleEndian.AppendUint64(e.p, v); return e }
func (e *enc) words(n int, f func(i int) uint64) *enc {
	for i := range n {
		e.w(f(i))
	}
	return e
}

func zeroWords(int) uint64 { return 0 }

func TestSnapshotCorrupt(t *testing.T) {
	t.Parallel()
	ok := func() *enc { return new(enc).b(1, 1).u(1).u(10).u(0) } // depth 64 (2 words), base 10, lo 0
	tests := []struct {
		name string
		p    []byte
	}{
		{"empty", nil},
		{"version0", new(enc).b(0, 0).u(1).p},
		{"version2", new(enc).b(2, 0).u(1).p},
		{"unknownFlag", new(enc).b(1, 4).u(1).p},
		{"depthZero", new(enc).b(1, 0).u(0).p},
		{"depthTooBig", new(enc).b(1, 0).u(bitsetbin.MaxDepth/64 + 1).p},
		{"depthOverlongVarint", new(enc).b(1, 0, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01).p},
		{"hiBelowWindow", ok().u(10*64-1).words(2, zeroWords).p},
		{"hiAboveWindow", ok().u(12*64).words(2, zeroWords).p},
		{"loAboveHi", new(enc).b(1, 1).u(1).u(10).u(1).u(10*64).words(2, zeroWords).p},
		{"loPastRing", new(enc).b(1, 1).u(1).u(10).u(2).u(11*64).words(2, zeroWords).p},
		{"bitsBelowLo", new(enc).b(1, 1).u(1).u(10).u(1).u(11 * 64).w(1).w(0).p},
		{"bitAboveHi", ok().u(10*64).words(2, func(i int) uint64 { return uint64(i) }).p},
		{"baseOverflows", new(enc).b(1, 1).u(1).u(math.MaxUint64>>6).u(0).u(math.MaxUint64).words(2, zeroWords).p},
		{"wordsMissing", ok().u(10 * 64).w(0).p},
		{"hugeDepthFewBytes", new(enc).b(1, 1).u(bitsetbin.MaxDepth / 64).u(0).u(0).u(0).w(1).p},
		{"lastTruncated", new(enc).b(1, 2).u(1).b(0x80).p},
	}
	for _, tt := range tests {
		var b bitsetbin.Bin
		if err := b.UnmarshalBinary(tt.p); !errors.Is(err, bitsetbin.ErrCorrupt) {
			t.Errorf("%s: err = %v, want ErrCorrupt", tt.name, err)
		}
	}
	// The well-formed variant decodes.
	var b bitsetbin.Bin
	if err := b.UnmarshalBinary(ok().u(10*64+5).words(2, func(i int) uint64 { return uint64(1-i) << 5 }).p); err != nil {
		t.Fatal(err)
	}
	if l, _ := b.LastSetIndex(); l != 10*64+5 {
		t.Fatalf("LastSetIndex = %d", l)
	}
}

// allocatedBytes reports the bytes f allocates on the heap.
func allocatedBytes(f func()) uint64 {
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	f()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// TestDecodeAllocationBound: a short input declaring the largest depth
// allocates next to nothing; a real snapshot allocates about its own size.
func TestDecodeAllocationBound(t *testing.T) {
	short := new(enc).b(1, 1).u(bitsetbin.MaxDepth/64).u(0).u(0).u(0).words(100, zeroWords).p
	var b bitsetbin.Bin
	if n := allocatedBytes(func() { _ = b.UnmarshalBinary(short) }); n > 1024 {
		t.Fatalf("decoding %d bytes allocated %d", len(short), n)
	}
	big := snapshotStates(t)["max"]
	p := snapshot(t, big)
	if n := allocatedBytes(func() {
		if err := b.UnmarshalBinary(p); err != nil {
			t.Fatal(err)
		}
	}); n > uint64(len(p))*101/100+1024 { // page rounding of the ring
		t.Fatalf("decoding %d bytes allocated %d", len(p), n)
	}
}

// FuzzUnmarshal: decoding never panics, errors wrap ErrCorrupt and leave the
// receiver unchanged, a decoded bin keeps every invariant and re-encodes to
// bytes that decode to the same bin, and the decoder never allocates more
// than a small multiple of its input.
func FuzzUnmarshal(f *testing.F) {
	for _, b := range snapshotStates(f) {
		if b.Depth() <= 65536 {
			p, _ := b.MarshalBinary()
			f.Add(p)
		}
	}
	f.Add([]byte{})
	f.Add([]byte{1, 3, 1, 0, 0, 0})
	f.Add(new(enc).b(1, 1).u(bitsetbin.MaxDepth / 64).u(0).u(0).u(0).p)
	f.Add(new(enc).b(1, 3).u(1).u(10).u(0).u(10*64 + 5).w(32).w(0).u(7).p)
	f.Fuzz(func(t *testing.T, p []byte) {
		var (
			victim *bitsetbin.Bin
			before []byte
			err    error
		)
		// The least of three decodes, each into a fresh victim: while
		// fuzzing, the worker's own goroutines allocate meanwhile (several
		// KiB at times), never the other way round.
		n := uint64(math.MaxUint64)
		for range 3 {
			victim, _ = bitsetbin.New(128)
			victim.Mark(999)
			before, _ = victim.MarshalBinary()
			n = min(n, allocatedBytes(func() { err = victim.UnmarshalBinary(p) }))
		}
		if limit := 2*uint64(len(p)) + 2048; n > limit {
			t.Fatalf("decoding %d bytes allocated %d (limit %d)", len(p), n, limit)
		}
		if err != nil {
			if !errors.Is(err, bitsetbin.ErrCorrupt) {
				t.Fatalf("err = %v, not ErrCorrupt", err)
			}
			if after, _ := victim.MarshalBinary(); !bytes.Equal(before, after) {
				t.Fatal("a failed decode changed the receiver")
			}
			return
		}
		if err := victim.CheckInvariants(); err != nil {
			t.Fatalf("decoded bin: %v", err)
		}
		q, _ := victim.MarshalBinary()
		var c bitsetbin.Bin
		if err := c.UnmarshalBinary(q); err != nil {
			t.Fatalf("re-decoding: %v", err)
		}
		if r, _ := c.MarshalBinary(); !bytes.Equal(q, r) {
			t.Fatal("round trip differs")
		}
		// The decoded bin works.
		top, _ := victim.LastSetIndex()
		for _, i := range []uint64{0, top, top + 1, top + 1<<30, math.MaxUint64} {
			victim.Mark(i)
			victim.Unmark(i / 2)
			if err := victim.CheckInvariants(); err != nil {
				t.Fatalf("after Mark(%d): %v", i, err)
			}
		}
	})
}
