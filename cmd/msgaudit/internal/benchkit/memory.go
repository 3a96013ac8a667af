package benchkit

import (
	"fmt"
	"runtime"
)

// MemCase is one memory measurement: impl filled with Fill in-order ids
// per producer at Depth, Producers.
type MemCase struct {
	Impl      string
	Depth     int
	Producers int
}

// Name returns "depth=2048/producers=64/impl=audit".
func (c MemCase) Name() string {
	return fmt.Sprintf("depth=%d/producers=%d/impl=%s", c.Depth, c.Producers, c.Impl)
}

// MemResult is the heap a structure retains, measured after GC.
type MemResult struct {
	MemCase
	// Fill is how many in-order ids each producer got: min(Depth,
	// FillBudget/Producers) but at least 64, so with 64 producers every
	// window up to depth 4096 is full.
	Fill int
	// Bytes is the growth of runtime.MemStats.HeapAlloc, after two GCs,
	// between before the structure was built and after it was filled,
	// with the structure still reachable.
	Bytes int64
	// BytesPerProducer is Bytes / Producers.
	BytesPerProducer float64
	// BytesPerID is Bytes / (Producers * Fill): per tracked id.
	BytesPerID float64
}

// FillBudget caps the ids MeasureMemory feeds in all (it keeps the 1024
// producer cases fast): each producer gets at most FillBudget/Producers.
const FillBudget = 1 << 18

// MemMatrix returns the memory cases: ours and the baselines at depth 2048
// with 64 producers; audit, sharded and map with 1024 producers (full
// profile); the audit at every other depth.
func MemMatrix(p Profile) []MemCase {
	var cs []MemCase
	ns := []int{MainProducers, 1024}
	depths := Depths
	if p == Quick {
		ns = []int{MainProducers}
		depths = []int{64, MainDepth, 1 << 20}
	}
	for _, im := range available([]string{"audit", "sharded", "connaudit", "map", "lru"}) {
		cs = append(cs, MemCase{Impl: im, Depth: MainDepth, Producers: MainProducers})
	}
	for _, n := range ns[1:] {
		for _, im := range []string{"audit", "sharded", "map"} {
			cs = append(cs, MemCase{Impl: im, Depth: MainDepth, Producers: n})
		}
	}
	for _, d := range depths {
		if d != MainDepth {
			cs = append(cs, MemCase{Impl: "audit", Depth: d, Producers: MainProducers})
		}
	}
	return cs
}

// MeasureMemory builds c's structure and feeds it in-order ids, each built
// on the spot (so whatever the structure keeps of an id string is counted:
// a real consumer's ids arrive as fresh strings too), and returns the heap
// it retains. Not safe to run concurrently with other allocation-heavy
// work: the figure is a heap difference.
func MeasureMemory(c MemCase) (MemResult, error) {
	im, ok := LookupImpl(c.Impl)
	if !ok {
		return MemResult{}, fmt.Errorf("benchkit: unknown impl %q", c.Impl)
	}
	fill := min(c.Depth, max(64, FillBudget/c.Producers))
	o := &Ops{Workload: InOrder, Depth: c.Depth, Producers: c.Producers, Keys: c.Producers}
	var m0, m1 runtime.MemStats
	runtime.GC()
	runtime.GC()
	runtime.ReadMemStats(&m0)
	t, err := im.New(o)
	if err != nil {
		return MemResult{}, fmt.Errorf("benchkit: %s: %w", im.Name, err)
	}
	one := make([]Op, 1)
	for s := 1; s <= fill; s++ {
		for p := 1; p <= c.Producers; p++ {
			one[0] = mkOp(p, uint64(s), 0)
			t.Pass(one)
		}
	}
	one = nil
	runtime.GC()
	runtime.GC()
	runtime.ReadMemStats(&m1)
	runtime.KeepAlive(t)
	runtime.KeepAlive(one)
	r := MemResult{MemCase: c, Fill: fill, Bytes: int64(m1.HeapAlloc) - int64(m0.HeapAlloc)}
	r.BytesPerProducer = float64(r.Bytes) / float64(c.Producers)
	r.BytesPerID = float64(r.Bytes) / float64(c.Producers*fill)
	return r, nil
}
