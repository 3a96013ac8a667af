package bitsetbin_test

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"testing"

	"github.com/acemq/msgaudit/bitsetbin"
	"github.com/acemq/msgaudit/msgid"
)

// step is one call on a Bin and its expected result.
type step struct {
	op   string // mark, set, get, unmark, last, inorder
	i    uint64
	want any // Sighting for mark; bool for set/get/unmark/inorder; lastWant for last
}

type lastWant struct {
	i  uint64
	ok bool
}

func mark(i uint64, v bitsetbin.Sighting) step { return step{"mark", i, v} }
func set(i uint64, v bool) step                { return step{"set", i, v} }
func get(i uint64, v bool) step                { return step{"get", i, v} }
func unmark(i uint64, v bool) step             { return step{"unmark", i, v} }
func inOrder(i uint64, v bool) step            { return step{"inorder", i, v} }
func last(i uint64) step                       { return step{"last", 0, lastWant{i, true}} }
func noLast() step                             { return step{"last", 0, lastWant{}} }

func cat(parts ...any) []step {
	var s []step
	for _, p := range parts {
		switch p := p.(type) {
		case step:
			s = append(s, p)
		case []step:
			s = append(s, p...)
		default:
			panic(fmt.Sprintf("cat: %T", p))
		}
	}
	return s
}

const (
	N = bitsetbin.FirstSeen
	D = bitsetbin.Duplicate
	O = bitsetbin.TooOld
)

func run(t *testing.T, b *bitsetbin.Bin, steps []step) {
	t.Helper()
	for k, s := range steps {
		var got any
		switch s.op {
		case "mark":
			got = b.Mark(s.i)
		case "set":
			got = b.Set(s.i)
		case "get":
			got = b.Get(s.i)
		case "unmark":
			got = b.Unmark(s.i)
		case "inorder":
			got = b.IsInOrder(s.i)
		case "last":
			i, ok := b.LastSetIndex()
			if !ok {
				i = 0
			}
			got = lastWant{i, ok}
		default:
			t.Fatalf("bad op %q", s.op)
		}
		if got != s.want {
			t.Fatalf("step %d: %s(%d) = %v, want %v", k, s.op, s.i, got, s.want)
		}
		if err := b.CheckInvariants(); err != nil {
			t.Fatalf("step %d: %s(%d): invariant: %v", k, s.op, s.i, err)
		}
	}
}

func newBin(t fataler, depth int) *bitsetbin.Bin {
	t.Helper()
	b, err := bitsetbin.New(depth)
	if err != nil {
		t.Fatalf("New(%d): %v", depth, err)
	}
	return b
}

const e12 = 1_000_000_000_000

// TestActiveMQExamples replays call sequences run against ActiveMQ's
// BitArrayBin whose results this package keeps, adapted to the tri-state
// Mark (ActiveMQ's setBit(i,true)→false is FirstSeen or TooOld here, →true is
// Duplicate). Sequences whose Java result is a quirk this package fixes have
// their own Test function below, named after the behaviour chosen; see
// docs/activemq-compatibility.md.
func TestActiveMQExamples(t *testing.T) {
	t.Parallel()
	var in1to10000, in1to4096, in1to4095 []step
	for i := uint64(1); i <= 10000; i++ {
		in1to10000 = append(in1to10000, mark(i, N))
		if i <= 4096 {
			in1to4096 = append(in1to4096, mark(i, N))
		}
		if i <= 4095 {
			in1to4095 = append(in1to4095, mark(i, N))
		}
	}
	examples := []struct {
		name  string
		depth int
		steps []step
	}{
		{"neverAnchored", 2048, []step{noLast()}},
		{"firstWindowAndSlide", 2048, []step{
			mark(0, N), mark(0, D), // index 0 is valid
			mark(1, N), mark(2047, N), mark(2048, N), mark(2111, N), // 2111 is the last in-window index
			mark(2112, N),                                       // slides one word, window starts at 64
			mark(0, O), mark(0, O), get(0, true), set(0, false), // below the window: reads "set", Set fails open
			mark(64, N), mark(64, D), mark(2047, D), last(2112),
		}},
		{"inOrder10000", 2048, cat(in1to10000,
			mark(10000, D), mark(7952, D), mark(7936, D), // window starts at 7936, as in Java
			mark(7935, O), mark(7872, O), get(7871, true),
			mark(10001, N), mark(10047, N), mark(10048, N), // window starts at 8000
			mark(7936, O), mark(8000, D),
		)},
		{"M-2048AlwaysCaught/4096", 2048, cat(in1to4096, mark(2048, D), mark(2047, O))},
		{"M-2048AlwaysCaught/4095", 2048, cat(in1to4095, mark(2047, D), mark(1984, D), mark(1983, O))},
		{"depth128", 128, []step{
			mark(0, N), mark(127, N), mark(128, N), mark(191, N), mark(192, N), // window starts at 64
			mark(0, O), mark(127, D), mark(128, D),
		}},
		{"depth128Jump", 128, []step{mark(0, N), mark(192, N), mark(0, O), get(0, true)}},
		{"outOfOrderInside", 2048, []step{
			mark(10, N), mark(5, N), mark(7, N), mark(5, D), mark(10, D), last(10),
		}},
		{"gaps", 2048, []step{mark(1, N), mark(1000, N), mark(500, N), mark(500, D), mark(999, N)}},
		{"largeGap", 128, []step{
			mark(64, N), mark(768, N), // window starts at 640, as in Java
			mark(576, O), mark(64, O), mark(768, D),
		}},
		{"rollbackMakesNew", 2048, []step{mark(5, N), unmark(5, true), mark(5, N), mark(5, D)}},
		{"rollbackNeverSet", 2048, []step{unmark(6, false), mark(6, N), unmark(6, true), unmark(6, false)}},
		{"largeNumber", 1024, []step{
			mark(1, N), mark(4294967394, N), get(4294967394, true), mark(4294967394, D),
			mark(1, O), get(1, true),
		}},
		{"isInOrder", 2048, []step{
			inOrder(5, true), inOrder(6, true), inOrder(8, false), inOrder(9, true),
			inOrder(9, false), inOrder(3, false), inOrder(4, true),
		}},
		{"isInOrderIgnoresBits", 2048, []step{mark(1, N), mark(2, N), inOrder(3, true), inOrder(5, false)}},
		{"lastSeq", 512, []step{
			mark(1, N), last(1), mark(64, N), last(64), mark(68, N), last(68), mark(30, N), last(68),
		}},
		{"isInOrderAtMaxUint64", 64, []step{
			inOrder(math.MaxUint64, true), inOrder(0, false), inOrder(math.MaxUint64-1, false),
			inOrder(math.MaxUint64, true), inOrder(math.MaxUint64, false),
		}},
	}
	for _, r := range examples {
		t.Run(r.name, func(t *testing.T) {
			t.Parallel()
			run(t, newBin(t, r.depth), r.steps)
		})
	}
}

// TestSizing: the guaranteed depth is the requested depth rounded up to a
// multiple of 64 (ActiveMQ's (W+1)/64+1 words guarantee only 448 for 500).
func TestSizing(t *testing.T) {
	t.Parallel()
	tests := []struct {
		depth, want int
		err         error
	}{
		{0, 2048, nil}, {1, 64, nil}, {62, 64, nil}, {63, 64, nil}, {64, 64, nil}, {65, 128, nil},
		{126, 128, nil}, {127, 128, nil}, {128, 128, nil}, {500, 512, nil}, {512, 512, nil},
		{1023, 1024, nil}, {1024, 1024, nil}, {2048, 2048, nil}, {32767, 32768, nil},
		{bitsetbin.MaxDepth, bitsetbin.MaxDepth, nil},
		{-1, 0, bitsetbin.ErrDepth}, {-200, 0, bitsetbin.ErrDepth},
		{bitsetbin.MaxDepth + 1, 0, bitsetbin.ErrDepth}, {math.MaxInt, 0, bitsetbin.ErrDepth},
	}
	for _, tt := range tests {
		b, err := bitsetbin.New(tt.depth)
		if !errors.Is(err, tt.err) || (tt.err == nil) != (err == nil) {
			t.Errorf("New(%d) err = %v, want %v", tt.depth, err, tt.err)
			continue
		}
		if err == nil && b.Depth() != tt.want {
			t.Errorf("New(%d).Depth() = %d, want %d", tt.depth, b.Depth(), tt.want)
		}
	}
	var zero bitsetbin.Bin
	if zero.Depth() != bitsetbin.DefaultDepth {
		t.Errorf("zero Bin Depth() = %d", zero.Depth())
	}
}

// TestGuaranteedDepth checks, for every depth, that after any in-order run
// every index in [M-Depth(), M] is Duplicate and that TooOld starts no
// higher than M-Depth()-1; for W=500 that is 512 behind M, not ActiveMQ's 448.
func TestGuaranteedDepth(t *testing.T) {
	t.Parallel()
	for _, w := range []int{1, 50, 63, 64, 65, 126, 128, 500, 512, 1000, 2048} {
		for _, m := range []uint64{3000, 3001, 3007, 3039, 3040, 3071} {
			b := newBin(t, w)
			for i := uint64(0); i <= m; i++ {
				b.Mark(i)
			}
			d := uint64(b.Depth())
			if d < uint64(w) {
				t.Fatalf("W=%d: Depth() = %d < W", w, d)
			}
			for i := m - d; i <= m; i++ {
				if v := b.Mark(i); v != bitsetbin.Duplicate {
					t.Fatalf("W=%d M=%d: Mark(%d) = %v, want duplicate (%d behind)", w, m, i, v, m-i)
				}
			}
			// Below the guarantee, a word-granular tail may still be
			// tracked; anything else must be TooOld, never FirstSeen.
			for i := m - d - 64; i < m-d; i++ {
				if v := b.Mark(i); v == bitsetbin.FirstSeen {
					t.Fatalf("W=%d M=%d: Mark(%d) = new below the window", w, m, i)
				}
			}
		}
	}
}

// TestSetAroundWindow is ActiveMQ's BitArrayBinTest.testSetAroundWindow:
// in-order marks, then everything within the guaranteed depth is a
// duplicate, what fell out is TooOld, and the bin carries on.
func TestSetAroundWindow(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		w    int
		data uint64
	}{{500, 2000}, {512, 2000}, {128, 512}} {
		b := newBin(t, c.w)
		for i := uint64(0); i <= c.data; i++ {
			if v := b.Mark(i); v != bitsetbin.FirstSeen {
				t.Fatalf("Mark(%d) = %v", i, v)
			}
			if l, ok := b.LastSetIndex(); !ok || l != i {
				t.Fatalf("LastSetIndex = %d, %v; want %d", l, ok, i)
			}
		}
		lowest := c.data&^63 - uint64(b.Depth()) // the window's lowest index
		for i := c.data; i >= lowest; i-- {
			if v := b.Mark(i); v != bitsetbin.Duplicate {
				t.Fatalf("W=%d: Mark(%d) = %v, want duplicate", c.w, i, v)
			}
		}
		for i := lowest - 1; i > lowest-200; i-- {
			if v := b.Mark(i); v != bitsetbin.TooOld {
				t.Fatalf("W=%d: Mark(%d) = %v, want too-old", c.w, i, v)
			}
		}
		for i := c.data + 1; i <= 2*c.data; i++ {
			if v := b.Mark(i); v != bitsetbin.FirstSeen {
				t.Fatalf("Mark(%d) = %v", i, v)
			}
		}
		if l, _ := b.LastSetIndex(); l != 2*c.data {
			t.Fatalf("LastSetIndex = %d", l)
		}
	}
}

// TestSetUnsetAroundWindow is testSetUnsetAroundWindow with its arguments
// in the intended order: set, unset, set again, then beyond.
func TestSetUnsetAroundWindow(t *testing.T) {
	t.Parallel()
	for _, w := range []int{500, 512, 128} {
		n := uint64(w)
		b := newBin(t, w)
		for i := uint64(0); i <= n; i++ {
			b.Mark(i)
		}
		for i := n; ; i-- {
			if !b.Unmark(i) {
				t.Fatalf("W=%d: Unmark(%d) = false", w, i)
			}
			if i == 0 {
				break
			}
		}
		if _, ok := b.LastSetIndex(); ok {
			t.Fatalf("W=%d: bits left after unmarking everything", w)
		}
		for i := uint64(0); i <= n; i++ {
			if v := b.Mark(i); v != bitsetbin.FirstSeen {
				t.Fatalf("W=%d: re-Mark(%d) = %v", w, i, v)
			}
		}
		for i := 2 * n; i < 4*n; i++ {
			if v := b.Mark(i); v != bitsetbin.FirstSeen {
				t.Fatalf("W=%d: Mark(%d) = %v", w, i, v)
			}
		}
	}
}

// TestSetAroundLongSizeMultiplier is testSetAroundLongSizeMultiplier, plus
// the top anchoring: the lower index is tracked, so it is a duplicate after.
func TestSetAroundLongSizeMultiplier(t *testing.T) {
	t.Parallel()
	for m := uint64(1); m <= 7; m++ {
		for v := uint64(0); v < 1000; v++ {
			var b bitsetbin.Bin
			if err := b.Resize(512); err != nil {
				t.Fatal(err)
			}
			if b.Mark(v+64*m) != bitsetbin.FirstSeen || b.Mark(v) != bitsetbin.FirstSeen || b.Mark(v) != bitsetbin.Duplicate {
				t.Fatalf("m=%d v=%d: lower index not tracked", m, v)
			}
			if l, _ := b.LastSetIndex(); l != v+64*m {
				t.Fatalf("LastSetIndex = %d", l)
			}
		}
	}
}

// --- ActiveMQ quirks fixed: each test states the behaviour chosen instead
// (docs/activemq-compatibility.md lists them). ---

// TestBandBelowWindowIsTooOld: Java set(63)→F, getBit(63)→F once the
// window starts at 64 ([F-63,F-1] read inconsistently). Here the whole zone
// below the window is TooOld, Set fails open, and Get says "assume set".
func TestBandBelowWindowIsTooOld(t *testing.T) {
	t.Parallel()
	b := newBin(t, 2048)
	run(t, b, []step{mark(0, N), mark(63, N), mark(2112, N)}) // window now starts at 64
	for i := uint64(0); i < 64; i++ {
		run(t, b, []step{mark(i, O), set(i, false), get(i, true), unmark(i, false)})
	}
	run(t, b, []step{mark(64, N), mark(64, D)})
}

// TestBandBelowWindowReadsSet: Java getBit(7935)→F but getBit(7871)→T
// after 1..10000; here both read "assume set" and both are TooOld.
func TestBandBelowWindowReadsSet(t *testing.T) {
	t.Parallel()
	b := newBin(t, 2048)
	for i := uint64(1); i <= 10000; i++ {
		b.Mark(i)
	}
	run(t, b, []step{get(7935, true), get(7871, true), mark(7935, O), mark(7871, O), get(7936, true)})
}

// TestSmallDepthHasTwoWords: Java gives W≤62 a single word, so
// set(63) after set(64) slid is lost. Here every depth has at least two words
// (guaranteed depth 64), and depth 0 means the default.
func TestSmallDepthHasTwoWords(t *testing.T) {
	t.Parallel()
	b := newBin(t, 1)
	run(t, b, []step{
		mark(0, N), mark(63, N), mark(64, N), mark(63, D), mark(64, D), mark(0, D),
		mark(128, N), mark(63, O), mark(64, D), mark(127, N),
	})
	if newBin(t, 0).Depth() != bitsetbin.DefaultDepth {
		t.Fatal("depth 0 is not the default")
	}
}

// TestSetHiLoReadsExact: W=50, set 0, 100, 150. Java getBit(100)→F
// although 100 is in its window; here 100 reads set, 0 (below) reads set.
func TestSetHiLoReadsExact(t *testing.T) {
	t.Parallel()
	run(t, newBin(t, 50), []step{
		mark(0, N), mark(100, N), mark(150, N), // window starts at 64
		get(0, true), mark(0, O), get(0, true),
		get(100, true), get(150, true), get(101, false), last(150),
	})
}

// TestTopAnchoringTracksEarlierIndexes: Java anchors at the bottom,
// so after set(100) the indexes 0..63 are never tracked. We anchor the first
// index in the top word: out-of-order arrivals below it are tracked.
func TestTopAnchoringTracksEarlierIndexes(t *testing.T) {
	t.Parallel()
	run(t, newBin(t, 2048), []step{
		mark(100, N), mark(70, N), mark(70, D), mark(63, N), mark(63, D), mark(0, N),
		get(0, true), get(63, true), get(1, false), get(64, false), last(100),
	})
	// A first index high up: the guaranteed depth below it is tracked too.
	b := newBin(t, 2048)
	run(t, b, []step{mark(e12+5, N), mark(e12+5-2048, N), mark(e12+5-2048, D), mark(e12-2048, N)})
	run(t, b, []step{mark(e12-2049, O), get(e12-2049, true)})
}

// TestRollbackAboveWindowIsPure: Java unset(1000) on a W=128 bin
// holding 0..10 slides the window and wipes the history. Here it is a no-op.
func TestRollbackAboveWindowIsPure(t *testing.T) {
	t.Parallel()
	b := newBin(t, 128)
	for i := uint64(0); i <= 10; i++ {
		b.Mark(i)
	}
	before := snapshot(t, b)
	run(t, b, []step{unmark(1000, false), unmark(math.MaxUint64, false)})
	if !bytes.Equal(before, snapshot(t, b)) {
		t.Fatal("Unmark above the window changed the bin")
	}
	run(t, b, []step{mark(5, D), last(10)})
}

// TestHugeJumpSlides: Java set(1e12) after set(1) wraps the int32 word
// index negative: nothing recorded, and set(1) stays a duplicate. Here the
// window slides (one ring reset), 1e12 is recorded, and 1 is TooOld.
func TestHugeJumpSlides(t *testing.T) {
	t.Parallel()
	run(t, newBin(t, 2048), []step{
		mark(1, N), mark(e12, N), mark(e12, D), get(e12, true), mark(1, O), set(1, false), last(e12),
	})
}

// TestAnchorHighTracksBelow: anchoring at 1e12 works in Java too, but
// set(1e12-1)→F records nothing and getBit(1e12-64)→T; here both are inside
// the window and exact.
func TestAnchorHighTracksBelow(t *testing.T) {
	t.Parallel()
	run(t, newBin(t, 2048), []step{
		mark(e12, N), mark(e12+1, N), mark(e12, D), mark(e12-1, N), get(e12-1, true),
		get(e12-64, false), get(e12-2048, false), get(e12-2049, true), mark(e12-1, D),
	})
}

// TestNoNarrowingAtWordTwoPow31: Java computes the word index
// 2^31 as Integer.MIN_VALUE: no slide, nothing recorded. Here it slides.
func TestNoNarrowingAtWordTwoPow31(t *testing.T) {
	t.Parallel()
	const j = 64 << 31 // 137438953472
	run(t, newBin(t, 2048), []step{mark(0, N), mark(j, N), get(j, true), mark(j, D), mark(0, O), last(j)})
}

// TestNoAliasing: Java aliases 64·(2^32+5) onto word 5, so set(320)
// afterwards is a false duplicate. Here 320 is TooOld, never Duplicate.
func TestNoAliasing(t *testing.T) {
	t.Parallel()
	const j = 64 * (1<<32 + 5) // 274877907264
	run(t, newBin(t, 2048), []step{mark(0, N), mark(j, N), mark(320, O), set(320, false), mark(j, D)})
	// And every multiple of 2^32 words above, up to the top of uint64.
	for k := uint64(1); k < 1<<26; k <<= 1 {
		b := newBin(t, 2048)
		b.Mark(320)
		jump := 320 + k*64<<32
		if v := b.Mark(jump); v != bitsetbin.FirstSeen {
			t.Fatalf("Mark(%d) = %v", jump, v)
		}
		if v := b.Mark(320); v != bitsetbin.TooOld {
			t.Fatalf("after a jump of %d·2^32 words Mark(320) = %v, want too-old", k, v)
		}
	}
}

// TestGetIsPure: Java getBit(5) on a fresh bin anchors it. Here Get
// never anchors, slides or allocates.
func TestGetIsPure(t *testing.T) {
	// Not parallel: AllocsPerRun.
	var b bitsetbin.Bin
	before := snapshot(t, &b)
	run(t, &b, []step{get(5, false), get(math.MaxUint64, false), unmark(5, false), noLast()})
	if !bytes.Equal(before, snapshot(t, &b)) {
		t.Fatal("Get changed an unanchored bin")
	}
	if n := testing.AllocsPerRun(100, func() { b.Get(5); b.Unmark(7) }); n != 0 {
		t.Fatalf("Get/Unmark on an unanchored bin allocate %v", n)
	}
	// The first Mark anchors where it lands, not where Get looked.
	run(t, &b, []step{mark(100000, N), mark(100000-2000, N)})
}

// TestGetAboveWindowIsPure: Java getBit(1000) on a W=128 bin slides it
// (losing bit 0) and moves getLastSetIndex to 959. Here it is a pure read.
func TestGetAboveWindowIsPure(t *testing.T) {
	t.Parallel()
	b := newBin(t, 128)
	b.Mark(0)
	before := snapshot(t, b)
	run(t, b, []step{get(1000, false), last(0)})
	if !bytes.Equal(before, snapshot(t, b)) {
		t.Fatal("Get above the window changed the bin")
	}
	run(t, b, []step{mark(0, D), get(0, true)})
}

// TestLastSetIndexIsTrue: Java's getLastSetIndex counts cleared and
// read-touched bits (unset(200)→200, getBit(300)→255). Here it is the true
// highest set bit.
func TestLastSetIndexIsTrue(t *testing.T) {
	t.Parallel()
	run(t, newBin(t, 512), []step{
		mark(1, N), mark(64, N), mark(68, N), mark(30, N), last(68),
		unmark(200, false), last(68), get(300, false), last(68),
		unmark(68, true), last(64), unmark(1, true), last(64), unmark(64, true), last(30),
		unmark(30, true), noLast(), mark(7, N), last(7),
	})
}

// TestLastSetIndexAfterRollback: Java keeps 100 after unset(100).
func TestLastSetIndexAfterRollback(t *testing.T) {
	t.Parallel()
	run(t, newBin(t, 512), []step{mark(100, N), last(100), unmark(100, true), noLast()})
}

// TestNoNegativeIndexes: Java accepts negative sequences (set(-1)
// anchors at 0; set(-100) then set(0) is a false duplicate). Indexes here
// are uint64, so a negative sequence cannot reach a bin: the id parser
// rejects it, and the top of the uint64 range works like any other index.
func TestNoNegativeIndexes(t *testing.T) {
	t.Parallel()
	for _, id := range []string{"p:-1", "p:-100", "p:-5"} {
		if _, _, err := msgid.Split(id); !errors.Is(err, msgid.ErrMalformed) {
			t.Fatalf("Split(%q) err = %v", id, err)
		}
	}
	run(t, newBin(t, 2048), []step{
		mark(math.MaxUint64, N), mark(math.MaxUint64, D), mark(math.MaxUint64-100, N),
		mark(math.MaxUint64-100, D), mark(math.MaxUint64-2111, N), mark(math.MaxUint64-2112, O),
		mark(0, O), get(0, true), last(math.MaxUint64),
	})
	run(t, newBin(t, 2048), []step{mark(0, N), mark(0, D), mark(1, N)})
}

// TestJumpCostIsBounded: Java loops once per word it slides (about 6 s
// for 1e10). Here a slide of n or more words is one ring reset; this test
// makes jumps that Java could not finish (1e12, to math.MaxUint64-1, and a
// thousand jumps of 2^48) and checks where the window lands.
func TestJumpCostIsBounded(t *testing.T) {
	// Not parallel: AllocsPerRun.
	b := newBin(t, 2048)
	run(t, b, []step{
		mark(0, N), mark(1e10, N), // window starts at 9999997952, as in Java
		mark(9999997952, N), mark(9999997951, O),
		mark(e12, N), mark(math.MaxUint64-1, N), mark(e12, O), mark(math.MaxUint64, N), last(math.MaxUint64),
	})
	c := newBin(t, 1<<20)
	c.Mark(0)
	for i := uint64(1); i <= 1000; i++ {
		if v := c.Mark(i << 48); v != bitsetbin.FirstSeen {
			t.Fatalf("Mark(%d) = %v", i<<48, v)
		}
	}
	j := uint64(1001) << 48
	if n := testing.AllocsPerRun(100, func() { j += e12; c.Mark(j) }); n != 0 {
		t.Fatalf("a jump allocates %v", n)
	}
}
