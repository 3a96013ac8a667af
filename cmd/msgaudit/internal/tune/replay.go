package tune

import (
	"context"
	"fmt"
	"math"
	"runtime"
	"slices"
	"strings"
	"sync"

	"github.com/acemq/msgaudit/audit"
	"github.com/acemq/msgaudit/bitsetbin"
)

// DefaultMargin is the factor Replay applies to the exact needs when
// Options.Margin is 0.
const DefaultMargin = 1.25

// maxGridAxis bounds each default grid axis.
const maxGridAxis = 18

// maxAxis bounds each grid axis given in Options.
const maxAxis = 64

// maxMargin bounds Options.Margin.
const maxMargin = 1000

// Options configures Replay.
type Options struct {
	// Depths and Caps are the grid, at most 64 values each. Nil means a
	// default: powers of two from 64 (depth) or 1 (cap) up to twice what
	// the trace needs (at least 2048 and 64), plus the exact needs and the
	// recommendation.
	Depths, Caps []int
	// Target is the fraction of the trace's duplicates a setting must
	// catch; 0 means 1 (every one). Must be in (0, 1].
	Target float64
	// Margin multiplies the exact needs (depth and cap) to give the
	// recommended setting; 0 means DefaultMargin. Must be in [1, 1000].
	// The recommendation is clamped to the audit's limits
	// (bitsetbin.MaxDepth, audit.MaxProducersLimit).
	Margin float64
	// Workers is how many cells are replayed at once; 0 (or more than
	// GOMAXPROCS) means GOMAXPROCS.
	Workers int
	// Progress, if not nil, is called after each replayed cell with the
	// number done and the total. It may be called from several goroutines,
	// never at once.
	Progress func(done, total int)
}

// Cell is the outcome of replaying the trace through one setting.
type Cell struct {
	Depth, MaxProducers int
	// Caught counts duplicates the audit judged Duplicate.
	Caught int
	// MissedTooOld counts duplicates judged TooOld or FirstSeen with the
	// producer's window intact: the sequence had fallen below the window
	// (the depth is too small) or below where it was anchored.
	MissedTooOld int
	// MissedEvicted counts duplicates let through because the producer
	// was evicted since the id's previous sighting (the cap is too small).
	MissedEvicted int
	// FalseDuplicates counts first sightings judged Duplicate: must be 0.
	FalseDuplicates int
	// NewTooOld counts first sightings judged TooOld: new messages the
	// audit could not vouch for (it fails open, so they pass).
	NewTooOld int
	// Evictions and RecentEvictions are the audits' counters (see
	// audit.Stats).
	Evictions, RecentEvictions uint64
	// Producers is the number of producers tracked at the end, summed over
	// the destinations' audits.
	Producers int
	// MemoryBytes estimates the audits' heap: Producers times the bytes
	// per producer measured for this depth (MeasurePerProducer).
	MemoryBytes int64
}

// Missed returns every duplicate let through.
func (c Cell) Missed() int { return c.MissedTooOld + c.MissedEvicted }

// meets reports whether c catches at least target of dups, with no false
// duplicate.
func (c Cell) meets(dups int, target float64) bool {
	return c.FalseDuplicates == 0 && float64(c.Caught) >= math.Ceil(target*float64(dups)-1e-9)
}

// cost ranks cells by size without the noise of a heap measurement: the
// window bits plus a fixed per-producer overhead.
func (c Cell) cost() float64 {
	return float64(c.Producers) * (float64(c.Depth)/8 + 256)
}

// Result is a whole replay.
type Result struct {
	Exact          *Exact
	Target, Margin float64
	// Cells is the grid, depth-major, ascending.
	Cells []Cell
	// NeedDepth is the smallest depth catching Target of the duplicates
	// when no producer is evicted (Exact.DepthFor, at least 1); NeedCap the
	// smallest cap catching Target of them at a depth that loses none to
	// the window (found by bisection: LRU eviction is monotone in the cap).
	// Both are 0 when the trace has no duplicates.
	NeedDepth, NeedCap int
	// Minimal is the smallest grid cell meeting the target (by window
	// bits and producers), or nil when none does.
	Minimal *Cell
	// Recommended is NeedDepth and NeedCap times Margin (rounded up),
	// replayed. Without duplicates it is the audit's defaults, or the
	// trace's producer count times Margin if that is larger.
	Recommended Cell
	// MarginDepth and MarginCap are how much larger the recommendation is
	// than the exact needs (at least Margin, more after rounding).
	MarginDepth, MarginCap float64
}

// Replay replays t through the grid and recommends a setting. It is
// deterministic except for Cell.MemoryBytes (a heap measurement).
func Replay(ctx context.Context, t *Trace, o Options) (*Result, error) {
	if o.Target == 0 {
		o.Target = 1
	}
	if o.Margin == 0 {
		o.Margin = DefaultMargin
	}
	if !(o.Target > 0 && o.Target <= 1) {
		return nil, fmt.Errorf("%w: target %v not in (0,1]", ErrOptions, o.Target)
	}
	if !(o.Margin >= 1 && o.Margin <= maxMargin) {
		return nil, fmt.Errorf("%w: margin %v not in [1, %d]", ErrOptions, o.Margin, maxMargin)
	}
	if len(o.Depths) > maxAxis || len(o.Caps) > maxAxis {
		return nil, fmt.Errorf("%w: %d depths and %d caps: more than %d on one axis", ErrOptions, len(o.Depths), len(o.Caps), maxAxis)
	}
	for _, d := range o.Depths {
		if d < 1 || d > bitsetbin.MaxDepth {
			return nil, fmt.Errorf("%w: depth %d not in 1..%d", ErrOptions, d, bitsetbin.MaxDepth)
		}
	}
	for _, c := range o.Caps {
		if c < 1 || c > audit.MaxProducersLimit {
			return nil, fmt.Errorf("%w: producer cap %d not in 1..%d", ErrOptions, c, audit.MaxProducersLimit)
		}
	}
	if procs := runtime.GOMAXPROCS(0); o.Workers <= 0 || o.Workers > procs {
		o.Workers = procs
	}
	e := Analyze(t)
	r := &Result{Exact: e, Target: o.Target, Margin: o.Margin}
	rp := newReplayer(t, e)

	recDepth := audit.DefaultDepth
	recCap := clampInt(ceilMul(e.Producers, o.Margin), audit.DefaultMaxProducers, audit.MaxProducersLimit)
	if e.Duplicates > 0 {
		r.NeedDepth = clampInt(int(min(e.DepthFor(o.Target), bitsetbin.MaxDepth)), 1, bitsetbin.MaxDepth)
		// A depth that loses nothing to the window, so that only the cap
		// decides what is caught.
		full := clampInt(int(min(e.MaxDistance(), bitsetbin.MaxDepth)), 64, bitsetbin.MaxDepth)
		lo, hi := 1, clampInt(e.Producers, 1, audit.MaxProducersLimit)
		for lo < hi {
			if err := ctx.Err(); err != nil {
				return nil, err
			}
			mid := lo + (hi-lo)/2
			if c := rp.cell(full, mid); c.meets(e.Duplicates, o.Target) {
				hi = mid
			} else {
				lo = mid + 1
			}
		}
		r.NeedCap = lo
		recDepth = clampInt(ceilMul(r.NeedDepth, o.Margin), 1, bitsetbin.MaxDepth)
		recCap = clampInt(ceilMul(r.NeedCap, o.Margin), 1, audit.MaxProducersLimit)
		r.MarginDepth = float64(recDepth) / float64(r.NeedDepth)
		r.MarginCap = float64(recCap) / float64(r.NeedCap)
	}

	depths, caps := o.Depths, o.Caps
	if depths == nil {
		depths = axis(64, max(2048, 2*int(min(e.MaxDistance(), bitsetbin.MaxDepth))), bitsetbin.MaxDepth, r.NeedDepth, recDepth)
	}
	if caps == nil {
		caps = axis(1, max(64, 2*e.Producers), audit.MaxProducersLimit, r.NeedCap, recCap)
	}
	depths, caps = sortedUnique(depths), sortedUnique(caps)

	mem := newMemo(t)
	type job struct{ i, depth, cp int }
	cells := make([]Cell, len(depths)*len(caps)+1)
	jobs := make(chan job)
	var wg sync.WaitGroup
	var mu sync.Mutex
	done := 0
	for range o.Workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			w := rp.clone()
			for j := range jobs {
				cells[j.i] = w.cell(j.depth, j.cp)
				if o.Progress != nil {
					mu.Lock()
					done++
					o.Progress(done, len(cells))
					mu.Unlock()
				}
			}
		}()
	}
	i := 0
	var err error
feed:
	for _, d := range depths {
		for _, c := range caps {
			select {
			case jobs <- job{i, d, c}:
			case <-ctx.Done():
				err = ctx.Err()
				break feed
			}
			i++
		}
	}
	if err == nil {
		jobs <- job{i, recDepth, recCap}
	}
	close(jobs)
	wg.Wait()
	if err == nil {
		err = ctx.Err() // cancelled after the last cell was handed out
	}
	if err != nil {
		return nil, err
	}
	for i := range cells {
		cells[i].MemoryBytes = int64(float64(cells[i].Producers) * mem.perProducer(cells[i].Depth))
	}
	r.Recommended = cells[len(cells)-1]
	r.Cells = cells[:len(cells)-1]
	for i := range r.Cells {
		c := &r.Cells[i]
		if !c.meets(e.Duplicates, o.Target) {
			continue
		}
		if r.Minimal == nil || c.cost() < r.Minimal.cost() {
			r.Minimal = c
		}
	}
	return r, nil
}

// replayer replays a trace through one setting at a time; it keeps its
// scratch space, so each goroutine needs its own (clone).
type replayer struct {
	t *Trace
	e *Exact
	// byDest lists the record indexes destination by destination, each
	// destination's in trace order, from byDest[start[d]] to
	// byDest[start[d+1]]; shared by the clones. Destinations have audits
	// of their own, so a cell replays them one after the other through one
	// audit, cleared in between: its memory is that of the largest
	// destination, however many destinations the trace has.
	byDest, start []int32
	gen           []uint32 // per stream: evictions so far
	genAt         []uint32 // per record: its stream's gen when it was checked
}

func newReplayer(t *Trace, e *Exact) *replayer {
	start := make([]int32, len(t.Dests)+1)
	for _, r := range t.Records {
		start[r.Dest+1]++
	}
	for d := range t.Dests {
		start[d+1] += start[d]
	}
	byDest := make([]int32, len(t.Records))
	next := slices.Clone(start[:len(t.Dests)])
	for i, r := range t.Records {
		byDest[next[r.Dest]] = int32(i)
		next[r.Dest]++
	}
	p := &replayer{t: t, e: e, byDest: byDest, start: start}
	return p.clone()
}

func (p *replayer) clone() *replayer {
	return &replayer{t: p.t, e: p.e, byDest: p.byDest, start: p.start,
		gen: make([]uint32, p.t.Streams()), genAt: make([]uint32, len(p.t.Records))}
}

func (p *replayer) cell(depth, maxProducers int) Cell {
	clear(p.gen)
	var dest uint32
	a, err := audit.New(audit.Options{Depth: depth, MaxProducers: maxProducers, OnEvict: func(key string, _ bool) {
		p.gen[p.t.stream(dest, key)]++
	}})
	if err != nil {
		// Replay validated depth and cap against the same limits.
		panic("tune: " + err.Error())
	}
	c := Cell{Depth: depth, MaxProducers: maxProducers}
	keys := p.t.Keys
	for d := range p.t.Dests {
		dest = uint32(d)
		for _, i := range p.byDest[p.start[d]:p.start[d+1]] {
			rec := p.t.Records[i]
			v := a.CheckKey(keys[rec.Key], rec.Seq)
			p.genAt[i] = p.gen[rec.Stream]
			prev := p.e.prev[i]
			switch {
			case prev < 0 && v == audit.Duplicate:
				c.FalseDuplicates++
			case prev < 0 && v == audit.TooOld:
				c.NewTooOld++
			case prev < 0:
			case v == audit.Duplicate:
				c.Caught++
			case p.genAt[prev] != p.gen[rec.Stream]:
				c.MissedEvicted++
			default:
				c.MissedTooOld++
			}
		}
		c.Producers += a.Len()
		a.Clear() // keeps the counters
	}
	s := a.Stats()
	c.Evictions, c.RecentEvictions = s.Evictions, s.RecentEvictions
	return c
}

// memo caches the measured bytes per producer of each depth.
type memo struct {
	mu     sync.Mutex
	keyLen int
	bytes  map[int]float64
}

func newMemo(t *Trace) *memo {
	n := 0
	for _, k := range t.Keys {
		n += len(k)
	}
	kl := 40
	if len(t.Keys) > 0 {
		kl = n / len(t.Keys)
	}
	return &memo{keyLen: kl, bytes: map[int]float64{}}
}

func (m *memo) perProducer(depth int) float64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	if b, ok := m.bytes[depth]; ok {
		return b
	}
	b := MeasurePerProducer(depth, m.keyLen)
	m.bytes[depth] = b
	return b
}

// measureProducers is how many producers MeasurePerProducer creates.
const measureProducers = 128

// MeasurePerProducer returns the heap an audit.Audit of the given depth
// holds per tracked producer whose key is keyLen bytes long, measured with
// runtime.MemStats around building an audit of 128 producers, each checked
// at sequence 1 and at sequence depth (a full window). It is a heap
// difference: concurrent allocation elsewhere in the process adds noise,
// so it never reports less than the window bits (depth/8 bytes).
func MeasurePerProducer(depth, keyLen int) float64 {
	pad := strings.Repeat("k", max(0, keyLen-8))
	var m0, m1 runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&m0)
	a, err := audit.New(audit.Options{Depth: depth, MaxProducers: measureProducers})
	if err != nil {
		return float64(depth) / 8
	}
	for p := range measureProducers {
		key := fmt.Sprintf("%s%08d", pad, p)
		a.CheckKey(key, 1)
		a.CheckKey(key, uint64(depth))
	}
	runtime.GC()
	runtime.ReadMemStats(&m1)
	runtime.KeepAlive(a)
	b := (float64(m1.HeapAlloc) - float64(m0.HeapAlloc)) / measureProducers
	return max(b, float64(depth)/8)
}

// axis returns powers of two from lo up to the first one >= hi (capped at
// limit), plus extra values (ignored when 0), at most maxGridAxis powers.
func axis(lo, hi, limit int, extra ...int) []int {
	var v []int
	for x := lo; x <= limit && len(v) < maxGridAxis; x *= 2 {
		v = append(v, x)
		if x >= hi {
			break
		}
	}
	for _, x := range extra {
		if x > 0 {
			v = append(v, x)
		}
	}
	return v
}

func sortedUnique(v []int) []int {
	v = slices.Clone(v)
	slices.Sort(v)
	return slices.Compact(v)
}

// ceilMul returns n×f rounded up, saturating at math.MaxInt (converting a
// larger float to int is implementation-defined).
func ceilMul(n int, f float64) int {
	x := math.Ceil(float64(n)*f - 1e-9)
	if !(x < math.MaxInt) {
		return math.MaxInt
	}
	return int(x)
}

func clampInt(x, lo, hi int) int { return max(lo, min(x, hi)) }
