package bitsetbin_test

import (
	"bytes"
	"errors"
	"testing"

	"github.com/acemq/msgaudit/bitsetbin"
)

func TestResizeGrowKeepsEverything(t *testing.T) {
	t.Parallel()
	b := newBin(t, 128)
	for i := uint64(1000); i <= 1300; i += 3 { // slides several times
		b.Mark(i)
	}
	lowest := uint64(1300)&^63 - 128
	var kept []uint64
	for i := lowest; i <= 1300; i++ {
		if b.Get(i) {
			kept = append(kept, i)
		}
	}
	if err := b.Resize(4096); err != nil {
		t.Fatal(err)
	}
	if b.Depth() != 4096 {
		t.Fatalf("Depth() = %d", b.Depth())
	}
	for _, i := range kept {
		if v := b.Mark(i); v != bitsetbin.Duplicate {
			t.Fatalf("after grow Mark(%d) = %v", i, v)
		}
	}
	// Below the old window the bin has no history: TooOld, never FirstSeen.
	for i := lowest - 500; i < lowest; i++ {
		if v := b.Mark(i); v != bitsetbin.TooOld {
			t.Fatalf("Mark(%d) below the old window = %v, want too-old", i, v)
		}
	}
	// As the window moves on, the full new depth becomes exact.
	for i := uint64(1301); i <= 9000; i++ {
		b.Mark(i)
	}
	for i := uint64(9000 - 4096); i <= 9000; i++ {
		if v := b.Mark(i); v != bitsetbin.Duplicate {
			t.Fatalf("Mark(%d) = %v after the window moved on", i, v)
		}
	}
	if err := b.CheckInvariants(); err != nil {
		t.Fatal(err)
	}
}

func TestResizeShrinkKeepsTop(t *testing.T) {
	t.Parallel()
	b := newBin(t, 2048)
	for i := uint64(0); i <= 3000; i++ {
		b.Mark(i)
	}
	if err := b.Resize(64); err != nil {
		t.Fatal(err)
	}
	if b.Depth() != 64 {
		t.Fatalf("Depth() = %d", b.Depth())
	}
	for i := uint64(3000 - 64); i <= 3000; i++ {
		if v := b.Mark(i); v != bitsetbin.Duplicate {
			t.Fatalf("Mark(%d) = %v after shrink", i, v)
		}
	}
	if v := b.Mark(1000); v != bitsetbin.TooOld {
		t.Fatalf("Mark(1000) = %v after shrink, want too-old", v)
	}
	if l, ok := b.LastSetIndex(); !ok || l != 3000 {
		t.Fatalf("LastSetIndex = %d, %v", l, ok)
	}
}

// TestResizeShrinkAnchoredLow: a bin anchored at a low index (window clamped
// at 0, its top word above the highest mark) keeps that mark when shrunk.
func TestResizeShrinkAnchoredLow(t *testing.T) {
	t.Parallel()
	b := newBin(t, 2048)
	run(t, b, []step{mark(5, N), mark(3, N)})
	if err := b.Resize(1); err != nil {
		t.Fatal(err)
	}
	run(t, b, []step{mark(5, D), mark(3, D), mark(4, N), last(5), mark(200, N), mark(5, O)})
}

// TestResizeShrinkDropsTop: when the highest set bit was rolled back and the
// shrink drops the rest, LastSetIndex follows.
func TestResizeShrinkDropsTop(t *testing.T) {
	t.Parallel()
	b := newBin(t, 2048)
	run(t, b, []step{mark(1000, N), mark(3000, N), unmark(3000, true), last(1000)})
	if err := b.Resize(64); err != nil {
		t.Fatal(err)
	}
	run(t, b, []step{noLast(), mark(1000, O), mark(3000, N)})
}

func TestResizeErrorsLeaveBin(t *testing.T) {
	t.Parallel()
	b := newBin(t, 128)
	b.Mark(77)
	before := snapshot(t, b)
	for _, d := range []int{-1, bitsetbin.MaxDepth + 1} {
		if err := b.Resize(d); !errors.Is(err, bitsetbin.ErrDepth) {
			t.Fatalf("Resize(%d) err = %v", d, err)
		}
	}
	if err := b.Resize(100); err != nil { // same ring size: no-op
		t.Fatal(err)
	}
	if !bytes.Equal(before, snapshot(t, b)) {
		t.Fatal("failed or no-op Resize changed the bin")
	}
}

func TestResizeUnanchoredAndZero(t *testing.T) {
	t.Parallel()
	var b bitsetbin.Bin
	if err := b.Resize(0); err != nil || b.Depth() != bitsetbin.DefaultDepth {
		t.Fatalf("Resize(0) = %v, depth %d", err, b.Depth())
	}
	if err := b.Resize(100); err != nil || b.Depth() != 128 {
		t.Fatalf("Resize(100) = %v, depth %d", err, b.Depth())
	}
	run(t, &b, []step{mark(1000, N), mark(1000-128, N), mark(1000-1000%64-128-1, O)})
}

func TestReset(t *testing.T) {
	b := newBin(t, 128)
	run(t, b, []step{mark(500, N), inOrder(1, true)})
	b.Reset()
	if b.Depth() != 128 {
		t.Fatalf("Reset changed the depth to %d", b.Depth())
	}
	fresh := newBin(t, 128)
	if !bytes.Equal(snapshot(t, b), snapshot(t, fresh)) {
		t.Fatal("Reset bin differs from a fresh one")
	}
	run(t, b, []step{noLast(), get(500, false), inOrder(7, true), mark(3, N), mark(150, N), mark(3, D), mark(192, N), mark(3, O)})
	if n := testing.AllocsPerRun(10, func() { b.Reset(); b.Mark(1) }); n != 0 {
		t.Fatalf("Reset+Mark allocates %v (the ring should be reused)", n)
	}
}

func TestZeroBin(t *testing.T) {
	var b bitsetbin.Bin
	run(t, &b, []step{noLast(), get(1, false), unmark(1, false), inOrder(4, true), mark(4000, N), mark(4000-2048, N), mark(4000-2048-64, O)})
}

// TestMarkAllocs: Mark allocates only on the first call, whatever it does
// afterwards (in order, duplicates, slides, resets, TooOld).
func TestMarkAllocs(t *testing.T) {
	for _, depth := range []int{1, 2048, 1 << 20} {
		b := newBin(t, depth)
		b.Mark(0)
		i := uint64(0)
		n := testing.AllocsPerRun(1000, func() {
			i++
			b.Mark(i)
			b.Mark(i)
			b.Mark(i / 2)
			b.Set(i)
			b.Get(i + 1000)
			b.Unmark(i)
			b.IsInOrder(i)
			b.LastSetIndex()
			if i%100 == 0 {
				i += 1 << 40
			}
		})
		if n != 0 {
			t.Errorf("depth %d: %v allocs per run", depth, n)
		}
	}
}
