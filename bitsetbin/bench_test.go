package bitsetbin_test

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/acemq/msgaudit/bitsetbin"
)

var benchDepths = []int{64, 2048, 65536, 1 << 20}

var sinkVerdict bitsetbin.Sighting

// BenchmarkMark measures one Mark per op:
//   - inorder: consecutive indexes, all FirstSeen, sliding one word every 64;
//   - duplicate: indexes already in the window, all Duplicate;
//   - random: random indexes in a window-sized band that creeps upward
//     (a mix of FirstSeen, Duplicate and a few TooOld);
//   - jump: random forward jumps of up to twice the window (partial slides
//     and whole-ring resets);
//   - reset: a jump of 2^40 every call (one ring reset each: O(depth/64)).
func BenchmarkMark(b *testing.B) {
	for _, depth := range benchDepths {
		d := uint64(depth)
		b.Run(fmt.Sprintf("depth=%d/pattern=inorder", depth), func(b *testing.B) {
			bin := newBin(b, depth)
			bin.Mark(0) // allocate the ring before timing
			b.ReportAllocs()
			var v bitsetbin.Sighting
			for i := 1; b.Loop(); i++ {
				v = bin.Mark(uint64(i))
			}
			sinkVerdict = v
		})
		b.Run(fmt.Sprintf("depth=%d/pattern=duplicate", depth), func(b *testing.B) {
			bin := newBin(b, depth)
			for i := uint64(0); i <= d; i++ {
				bin.Mark(i)
			}
			b.ReportAllocs()
			var v bitsetbin.Sighting
			for i := uint64(0); b.Loop(); i++ {
				v = bin.Mark(i & (d - 1)) // every depth is a power of two
			}
			if v != bitsetbin.Duplicate {
				b.Fatal(v)
			}
			sinkVerdict = v
		})
		b.Run(fmt.Sprintf("depth=%d/pattern=random", depth), func(b *testing.B) {
			bin := newBin(b, depth)
			idx := randomIndexes(1<<16, func(r *rand.Rand, i int) uint64 { return uint64(i)/4 + r.Uint64N(d) })
			bin.Mark(idx[0])
			b.ReportAllocs()
			var v bitsetbin.Sighting
			for i := 0; b.Loop(); i++ {
				v = bin.Mark(idx[i&(len(idx)-1)] + uint64(i>>16)<<14)
			}
			sinkVerdict = v
		})
		b.Run(fmt.Sprintf("depth=%d/pattern=jump", depth), func(b *testing.B) {
			bin := newBin(b, depth)
			var at uint64
			idx := randomIndexes(1<<12, func(r *rand.Rand, _ int) uint64 { at += 1 + r.Uint64N(2*d); return at })
			bin.Mark(0)
			b.ReportAllocs()
			var v bitsetbin.Sighting
			for i := 0; b.Loop(); i++ {
				v = bin.Mark(idx[i&(len(idx)-1)] + uint64(i>>12)*at)
			}
			sinkVerdict = v
		})
		b.Run(fmt.Sprintf("depth=%d/pattern=reset", depth), func(b *testing.B) {
			bin := newBin(b, depth)
			bin.Mark(0)
			b.ReportAllocs()
			var v bitsetbin.Sighting
			for i := uint64(1); b.Loop(); i++ {
				v = bin.Mark(i << 40)
			}
			sinkVerdict = v
		})
	}
}

func randomIndexes(n int, f func(r *rand.Rand, i int) uint64) []uint64 {
	r := rand.New(rand.NewPCG(1, 2))
	idx := make([]uint64, n)
	for i := range idx {
		idx[i] = f(r, i)
	}
	return idx
}

var sinkBool bool

// BenchmarkGet and BenchmarkUnmark measure the pure read and the rollback
// of an index inside the window.
func BenchmarkGet(b *testing.B) {
	for _, depth := range benchDepths {
		b.Run(fmt.Sprintf("depth=%d", depth), func(b *testing.B) {
			bin := newBin(b, depth)
			d := uint64(depth)
			for i := uint64(0); i <= d; i += 2 {
				bin.Mark(i)
			}
			b.ReportAllocs()
			var s bool
			for i := uint64(0); b.Loop(); i++ {
				s = bin.Get(i & (d - 1))
			}
			sinkBool = s
		})
	}
}

func BenchmarkUnmarkMark(b *testing.B) {
	for _, depth := range benchDepths {
		b.Run(fmt.Sprintf("depth=%d", depth), func(b *testing.B) {
			bin := newBin(b, depth)
			d := uint64(depth)
			for i := uint64(0); i <= d; i++ {
				bin.Mark(i)
			}
			b.ReportAllocs()
			for i := uint64(0); b.Loop(); i++ {
				j := i & (d/2 - 1) // never the top, which costs a scan
				bin.Unmark(j)
				bin.Mark(j)
			}
		})
	}
}

func BenchmarkMarshal(b *testing.B) {
	for _, depth := range []int{2048, 65536} {
		b.Run(fmt.Sprintf("depth=%d", depth), func(b *testing.B) {
			bin := newBin(b, depth)
			for i := uint64(0); i < 3*uint64(depth); i += 3 {
				bin.Mark(i)
			}
			buf, _ := bin.AppendBinary(nil)
			b.ReportAllocs()
			b.SetBytes(int64(len(buf)))
			for b.Loop() {
				buf, _ = bin.AppendBinary(buf[:0])
				var c bitsetbin.Bin
				if _, err := c.DecodeFrom(buf); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
