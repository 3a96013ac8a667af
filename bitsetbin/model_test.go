package bitsetbin_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math"
	"testing"

	"github.com/acemq/msgaudit/bitsetbin"
	"pgregory.net/rapid"
)

// model is the reference the property and fuzz tests check a Bin against:
// the set of indexes marked and not rolled back, the highest index marked,
// and the lowest index the bin guarantees to answer exactly.
type model struct {
	depth    uint64 // guaranteed depth
	marked   map[uint64]bool
	anchored bool
	hi       uint64 // highest index marked
	// low is the lowest index answered exactly: max over time of hi-depth
	// (a grow does not lower it, a shrink raises it).
	low     uint64
	last    uint64
	hasLast bool
}

func newModel(depth int) *model {
	return &model{depth: uint64(depth), marked: map[uint64]bool{}}
}

func satSub(a, b uint64) uint64 {
	if a < b {
		return 0
	}
	return a - b
}

// record notes that i was recorded (FirstSeen) or may have been (Set false below
// low: an index the bin reported as not set stays TooOld forever if it was
// not recorded, so treating it as marked weakens no check).
func (m *model) record(i uint64) {
	m.marked[i] = true
	if !m.anchored {
		m.anchored, m.hi, m.low = true, i, satSub(i, m.depth)
		return
	}
	if i > m.hi {
		m.hi = i
		m.low = max(m.low, satSub(i, m.depth))
	}
}

// fataler is what both *testing.T and *rapid.T offer.
type fataler interface {
	Helper()
	Fatalf(format string, args ...any)
}

type opKind uint8

const (
	opMark opKind = iota
	opSet
	opGet
	opUnmark
	opInOrder
	opLast
	opReset
	opResize
	opSnapshot
	opKinds
)

var opNames = [...]string{"Mark", "Set", "Get", "Unmark", "IsInOrder", "LastSetIndex", "Reset", "Resize", "Snapshot"}

// index turns a mode and a signed distance into an index near the model's
// current position: around hi, near zero, a huge jump, or near MaxUint64.
func (m *model) index(mode uint8, delta int64) uint64 {
	switch mode % 8 {
	case 0, 1, 2, 3: // around hi, mostly within and just below the window
		if delta < 0 {
			return satSub(m.hi, uint64(-delta))
		}
		if m.hi > math.MaxUint64-uint64(delta) {
			return math.MaxUint64
		}
		return m.hi + uint64(delta)
	case 4: // near zero
		return uint64(delta) & 0xffff
	case 5: // relative to the guarantee boundary
		return satSub(m.low, 64) + uint64(delta)&127
	case 6: // a huge jump
		return m.hi + (uint64(delta)&0xffff+1)<<40
	default: // near the top of uint64
		return math.MaxUint64 - uint64(delta)&0xfff
	}
}

// step applies one operation to b and checks it against the model.
func (m *model) step(t fataler, b *bitsetbin.Bin, k opKind, i uint64, depth int) {
	t.Helper()
	name := opNames[k]
	switch k {
	case opMark:
		v := b.Mark(i)
		switch {
		case !m.anchored && v != bitsetbin.FirstSeen:
			t.Fatalf("Mark(%d) on an unanchored bin = %v", i, v)
		case v == bitsetbin.Duplicate && !m.marked[i]:
			t.Fatalf("false duplicate: Mark(%d) (hi %d, low %d)", i, m.hi, m.low)
		case v == bitsetbin.TooOld && i >= m.low:
			t.Fatalf("Mark(%d) = too-old within the guaranteed depth (hi %d, low %d)", i, m.hi, m.low)
		case v == bitsetbin.FirstSeen && m.marked[i]:
			t.Fatalf("missed duplicate: Mark(%d) = new (hi %d, low %d)", i, m.hi, m.low)
		}
		if v == bitsetbin.FirstSeen {
			m.record(i)
		}
	case opSet:
		got := b.Set(i)
		if got && !m.marked[i] {
			t.Fatalf("false duplicate: Set(%d) = true", i)
		}
		if m.anchored && i >= m.low && got != m.marked[i] {
			t.Fatalf("Set(%d) = %v within the guaranteed depth, want %v", i, got, m.marked[i])
		}
		if !got {
			m.record(i)
		}
	case opGet:
		got := b.Get(i)
		switch {
		case !m.anchored || i > m.hi:
			if got {
				t.Fatalf("Get(%d) = true above everything marked (hi %d)", i, m.hi)
			}
		case i >= m.low:
			if got != m.marked[i] {
				t.Fatalf("Get(%d) = %v, want %v", i, got, m.marked[i])
			}
		case !got && m.marked[i]:
			t.Fatalf("Get(%d) = false for a marked index still in the window", i)
		}
	case opUnmark:
		got := b.Unmark(i)
		if got && !m.marked[i] {
			t.Fatalf("Unmark(%d) = true for an index not marked", i)
		}
		if m.anchored && i >= m.low && i <= m.hi && got != m.marked[i] {
			t.Fatalf("Unmark(%d) = %v, want %v", i, got, m.marked[i])
		}
		delete(m.marked, i)
	case opInOrder:
		want := !m.hasLast || (m.last != math.MaxUint64 && i == m.last+1)
		if got := b.IsInOrder(i); got != want {
			t.Fatalf("IsInOrder(%d) = %v, want %v (last %d)", i, got, want, m.last)
		}
		m.last, m.hasLast = i, true
	case opLast:
		got, ok := b.LastSetIndex()
		var mx uint64
		any := false
		for j := range m.marked {
			if !any || j > mx {
				mx, any = j, true
			}
		}
		switch {
		case !any && ok:
			t.Fatalf("LastSetIndex = %d with nothing marked", got)
		case any && mx >= m.low && (!ok || got != mx):
			t.Fatalf("LastSetIndex = %d, %v; want %d", got, ok, mx)
		case ok && !m.marked[got]:
			t.Fatalf("LastSetIndex = %d, not marked", got)
		}
	case opReset:
		b.Reset()
		*m = *newModel(int(m.depth))
	case opResize:
		err := b.Resize(depth)
		if depth < 0 || depth > bitsetbin.MaxDepth {
			if !errors.Is(err, bitsetbin.ErrDepth) {
				t.Fatalf("Resize(%d) err = %v", depth, err)
			}
			break
		}
		if err != nil {
			t.Fatalf("Resize(%d): %v", depth, err)
		}
		d := uint64(b.Depth())
		if depth == 0 {
			depth = bitsetbin.DefaultDepth
		}
		if d < uint64(depth) || d >= uint64(depth)+64 {
			t.Fatalf("Resize(%d): Depth() = %d", depth, d)
		}
		if d < m.depth && m.anchored {
			m.low = max(m.low, satSub(m.hi, d))
		}
		m.depth = d
	case opSnapshot:
		p, err := b.MarshalBinary()
		if err != nil {
			t.Fatalf("MarshalBinary: %v", err)
		}
		var c bitsetbin.Bin
		if err := c.UnmarshalBinary(p); err != nil {
			t.Fatalf("UnmarshalBinary(MarshalBinary()): %v", err)
		}
		q, _ := c.MarshalBinary()
		if !bytes.Equal(p, q) {
			t.Fatalf("snapshot round trip differs:\n%x\n%x", p, q)
		}
		*b = c // carry on with the restored bin
	}
	if err := b.CheckInvariants(); err != nil {
		t.Fatalf("after %s(%d): %v", name, i, err)
	}
	if uint64(b.Depth()) != m.depth {
		t.Fatalf("after %s: Depth() = %d, model %d", name, b.Depth(), m.depth)
	}
}

var propDepths = []int{1, 64, 65, 128, 500, 2048}

// TestBinProperties runs random traces of every operation against the model:
// never a false duplicate, never a missed duplicate within the guaranteed
// depth of the highest index, TooOld only below it.
func TestBinProperties(t *testing.T) {
	t.Parallel()
	rapid.Check(t, func(t *rapid.T) {
		depth := rapid.SampledFrom(propDepths).Draw(t, "depth")
		b := newBin(t, depth)
		m := newModel(b.Depth())
		d := int64(b.Depth())
		n := rapid.IntRange(1, 400).Draw(t, "ops")
		for range n {
			k := weightedKind(rapid.IntRange(0, 99).Draw(t, "op"))
			mode := rapid.Uint8().Draw(t, "mode")
			delta := rapid.Int64Range(-3*d-64, d+64).Draw(t, "delta")
			nd := 0
			if k == opResize {
				nd = rapid.SampledFrom([]int{-1, 0, 1, 63, 64, 100, 500, 2048, 5000, bitsetbin.MaxDepth + 1}).Draw(t, "newDepth")
			}
			m.step(t, b, k, m.index(mode, delta), nd)
		}
	})
}

// weightedKind maps 0..99 to an operation, mostly marks.
func weightedKind(x int) opKind {
	switch {
	case x < 45:
		return opMark
	case x < 55:
		return opSet
	case x < 67:
		return opGet
	case x < 80:
		return opUnmark
	case x < 86:
		return opInOrder
	case x < 92:
		return opLast
	case x < 93:
		return opReset
	case x < 96:
		return opResize
	default:
		return opSnapshot
	}
}

// FuzzBinOps decodes a byte string into an operation sequence and checks
// every step against the model. Layout: depth selector, then 4 bytes per
// operation: kind, index mode, signed 16-bit distance.
func FuzzBinOps(f *testing.F) {
	f.Add([]byte{5, 0, 0, 0, 1, 0, 0, 0, 2})
	f.Add([]byte{0, 0, 4, 0, 0, 0, 0, 0, 64, 3, 0, 0, 0, 0, 6, 1, 0, 0, 0, 0, 0, 0, 5, 0, 0})
	f.Add([]byte{3, 0, 7, 0, 0, 0, 7, 1, 0, 0, 0, 0xff, 0xff, 3, 0, 0, 0, 2, 0, 0, 0})
	f.Add([]byte{1, 0, 4, 10, 0, 0, 4, 200, 0, 0, 6, 0, 0, 7, 1, 0, 0, 0, 0, 0xf0, 0xff, 8, 0, 0, 0})
	f.Add(bytes.Repeat([]byte{0, 0, 1, 0}, 300))
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) == 0 {
			return
		}
		depth := propDepths[int(data[0])%len(propDepths)]
		b := newBin(t, depth)
		m := newModel(b.Depth())
		data = data[1:]
		for len(data) >= 4 {
			k := opKind(data[0] % uint8(opKinds))
			delta := int64(int16(binary.LittleEndian.Uint16(data[2:4])))
			nd := 0
			if k == opResize {
				nd = []int{-1, 0, 1, 64, 100, 500, 2048, 5000, bitsetbin.MaxDepth + 1}[int(data[1])%9]
			}
			m.step(t, b, k, m.index(data[1], delta), nd)
			data = data[4:]
		}
	})
}
