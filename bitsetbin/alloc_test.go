package bitsetbin_test

import (
	"testing"
	"unsafe"

	"github.com/acemq/msgaudit/bitsetbin"
)

// sinkBin keeps the bins of the allocation tests on the heap.
var sinkBin *bitsetbin.Bin

// binClass is the allocator's size class of a Bin: its size rounded up to
// 16 bytes (the classes from 32 to 128 bytes are the multiples of 16).
var binClass = (uint64(unsafe.Sizeof(bitsetbin.Bin{})) + 15) &^ 15

// TestBinSize: a Bin stays within 96 bytes, so an audit entry (a Bin and two
// counters) stays within one 128-byte cache-line pair.
func TestBinSize(t *testing.T) {
	if s := unsafe.Sizeof(bitsetbin.Bin{}); s > 96 {
		t.Fatalf("unsafe.Sizeof(Bin{}) = %d, want ≤ 96", s)
	}
}

// TestRingAllocation: the ring a bin allocates holds exactly Depth()/64
// words (the window's last word lives in the Bin), so the usual
// power-of-two depths fill a size class exactly: New and the first Mark
// allocate the Bin and Depth()/8 bytes, nothing else, and later Marks
// nothing. Resize and DecodeFrom allocate rings of the same exact size.
func TestRingAllocation(t *testing.T) {
	// Not parallel: TotalAlloc counts every goroutine's allocations.
	for _, depth := range []int{0, 1, 64, 100, 2048, 65536, 1 << 20} {
		b := newBin(t, depth)
		words := b.Depth() / 64
		if n, c := b.RingWords(); n != 0 || c != 0 {
			t.Fatalf("depth %d: New allocated a ring of %d words (cap %d)", depth, n, c)
		}
		b.Mark(1 << 20)
		if n, c := b.RingWords(); n != words || c != words {
			t.Fatalf("depth %d: ring has %d words (cap %d), want %d", depth, n, c, words)
		}

		if a := testing.AllocsPerRun(20, func() {
			b, _ := bitsetbin.New(depth)
			b.Mark(1 << 20)
			sinkBin = b
		}); a != 2 {
			t.Errorf("depth %d: New+Mark makes %v allocations, want 2 (the Bin and its ring)", depth, a)
		}
		// The least of three runs: the runtime and the test framework may
		// allocate a few bytes meanwhile, never fewer.
		const bins = 100
		got := uint64(1<<64 - 1)
		for range 3 {
			got = min(got, allocatedBytes(func() {
				for range bins {
					b, _ := bitsetbin.New(depth)
					b.Mark(1 << 20)
					sinkBin = b
				}
			}))
		}
		// Every depth here has a power-of-two number of words, which fills
		// its size class (up to 32 KiB) or its pages (above) exactly; but
		// the race detector pads an 8-byte object to 16 bytes.
		ring := max(uint64(8*words), 16)
		// Any extra word or header costs at least 8 bytes a bin: 800 in all.
		if limit := bins*(ring+binClass) + 512; got > limit {
			t.Errorf("depth %d: %d bins allocated %d bytes, want ≤ %d (%d-byte rings, %d-byte Bins)",
				depth, bins, got, limit, ring, binClass)
		}

		i := uint64(1 << 20)
		if a := testing.AllocsPerRun(100, func() { i += 100; b.Mark(i) }); a != 0 {
			t.Errorf("depth %d: Mark after the first allocates %v", depth, a)
		}

		// Resize and decoding allocate exact rings too.
		if err := b.Resize(b.Depth() + 64); err != nil {
			t.Fatal(err)
		}
		if n, c := b.RingWords(); n != words+1 || c != words+1 {
			t.Fatalf("depth %d: resized ring has %d words (cap %d), want %d", depth, n, c, words+1)
		}
		var d bitsetbin.Bin
		if _, err := d.DecodeFrom(snapshot(t, b)); err != nil {
			t.Fatal(err)
		}
		if n, c := d.RingWords(); n != words+1 || c != words+1 {
			t.Fatalf("depth %d: decoded ring has %d words (cap %d), want %d", depth, n, c, words+1)
		}
	}
}
