package benchkit

import (
	"fmt"
	"runtime"
	"sync/atomic"
	"testing"

	"github.com/acemq/msgaudit/cmd/msgaudit/internal/benchreport"
)

// Case is one cell of the benchmark matrix.
type Case struct {
	Workload  Workload
	Depth     int
	Producers int
	Impl      string
	// Goroutines is 0 for the single-goroutine loop (Target.Pass), else
	// the number of goroutines checking concurrently: 1 (a plain loop
	// calling ConcurrentTarget.Check, the reference for scaling) or
	// GOMAXPROCS (b.RunParallel).
	Goroutines int
}

// Name returns the sub-benchmark name, key=value pairs:
// "workload=inorder/depth=2048/producers=64/impl=audit[/goroutines=2]".
// The impl comes last so that benchstat can compare impls per workload.
func (c Case) Name() string {
	s := fmt.Sprintf("workload=%s/depth=%d/producers=%d/impl=%s", c.Workload, c.Depth, c.Producers, c.Impl)
	if c.Goroutines > 0 {
		s += fmt.Sprintf("/goroutines=%d", c.Goroutines)
	}
	return s
}

// Bench returns the benchmark function of c. State that survives between
// the calls testing makes with growing b.N (a primed replay target) lives
// in the returned closure, so each call only re-does what it must.
func (c Case) Bench() (func(b *testing.B), error) {
	im, ok := LookupImpl(c.Impl)
	if !ok {
		return nil, fmt.Errorf("benchkit: unknown impl %q", c.Impl)
	}
	if c.Goroutines > 0 && !im.Concurrent {
		return nil, fmt.Errorf("benchkit: impl %q is not safe for concurrent use", c.Impl)
	}
	var primed Target // reused across calls for repeatable workloads
	return func(b *testing.B) {
		ops, err := Build(c.Workload, c.Depth, c.Producers)
		if err != nil {
			b.Fatal(err)
		}
		if c.Goroutines > 0 && !ops.Repeatable {
			b.Fatalf("benchkit: workload %s is not repeatable; parallel cases need one", c.Workload)
		}
		fresh := func() Target {
			t, err := newTarget(im, ops)
			if err != nil {
				b.Fatal(err)
			}
			return t
		}
		var t Target
		if ops.Repeatable {
			if primed == nil {
				primed = fresh()
			}
			t = primed
		} else {
			t = fresh()
		}
		b.ReportAllocs()
		if c.Goroutines > 0 {
			runParallel(b, t.(ConcurrentTarget), ops, c.Goroutines)
			return
		}
		b.ResetTimer()
		dups, passes := 0, 0
		left, pos := b.N, 0
		for left > 0 {
			if pos == len(ops.Ops) {
				pos = 0
				passes++
				if !ops.Repeatable {
					b.StopTimer()
					t = fresh()
					b.StartTimer()
				}
			}
			n := min(left, len(ops.Ops)-pos)
			dups += t.Pass(ops.Ops[pos : pos+n])
			pos += n
			left -= n
		}
		b.StopTimer()
		if !im.Exact {
			return
		}
		if want := passes*countWant(ops.Ops) + countWant(ops.Ops[:pos]); dups != want {
			b.Fatalf("%s: %d duplicates, want %d: the implementation or the workload is wrong", c.Name(), dups, want)
		}
	}, nil
}

func countWant(ops []Op) int {
	n := 0
	for i := range ops {
		n += int(ops[i].Want)
	}
	return n
}

// partition splits ops into g slices by producer (producer index mod g),
// so concurrent goroutines never check the same id at once and every
// check keeps its expected verdict.
func partition(ops []Op, g int) [][]Op {
	parts := make([][]Op, g)
	for i := range ops {
		k := int(ops[i].P) % g
		parts[k] = append(parts[k], ops[i])
	}
	return parts
}

func runParallel(b *testing.B, t ConcurrentTarget, ops *Ops, goroutines int) {
	if goroutines == 1 {
		part := ops.Ops
		b.ResetTimer()
		for i, k := 0, 0; i < b.N; i++ {
			t.Check(&part[k])
			if k++; k == len(part) {
				k = 0
			}
		}
		return
	}
	if goroutines != runtime.GOMAXPROCS(0) {
		b.Fatalf("benchkit: goroutines=%d but b.RunParallel runs GOMAXPROCS=%d", goroutines, runtime.GOMAXPROCS(0))
	}
	parts := partition(ops.Ops, goroutines)
	var next atomic.Int32
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		part := parts[int(next.Add(1)-1)%len(parts)]
		k := 0
		for pb.Next() {
			t.Check(&part[k])
			if k++; k == len(part) {
				k = 0
			}
		}
	})
}

// Profile selects how much of the matrix to run.
type Profile string

// The profiles.
const (
	// Quick is the subset "msgaudit bench --quick" runs in under 30 s.
	Quick Profile = "quick"
	// Full is every case.
	Full Profile = "full"
)

// Depths and ProducerCounts are the sweeps of the full matrix.
var (
	Depths         = []int{64, 2048, 65536, 1 << 20}
	ProducerCounts = []int{1, 64, 1024}
)

// Main sizes: the default depth and ActiveMQ's default producer cap (the
// report's main cell).
const (
	MainDepth     = benchreport.MainDepth
	MainProducers = benchreport.MainProducers
)

// Matrix returns the cases of profile p, grouped so that consecutive cases
// share a workload (Build caches only the most recent few).
//
//   - every single-goroutine impl × every workload at depth 2048, 64 producers;
//   - the sweeps: depth (64 … 1<<20, 64 producers) and producers (1 … 1024,
//     depth 2048) for ours, the floors and the baselines, on inorder and replay;
//   - the concurrent impls on replay with 1 and GOMAXPROCS goroutines.
//
// Quick keeps the main cell for inorder and replay, the sweeps for audit,
// floor-map and map on inorder, and the sharded/locked scaling pair.
func Matrix(p Profile) []Case {
	var cs []Case
	single := []string{"audit", "locked", "sharded", "connaudit", "map", "lru", "floor-bit", "floor-map", "floor-parse"}
	sweep := []string{"audit", "floor-bit", "floor-map", "floor-parse", "map", "lru"}
	sweepW := []Workload{InOrder, Replay}
	workloads := Workloads
	par := []string{"locked", "sharded", "connaudit", "lru-locked"}
	if p == Quick {
		single = []string{"audit", "locked", "sharded", "connaudit", "map", "lru", "floor-map", "floor-parse"}
		sweep = []string{"audit", "floor-map", "map"}
		sweepW = []Workload{InOrder}
		workloads = []Workload{InOrder, Replay}
		par = []string{"locked", "sharded"}
	}
	single, par = available(single), available(par)
	for _, w := range workloads {
		for _, im := range single {
			cs = append(cs, Case{Workload: w, Depth: MainDepth, Producers: MainProducers, Impl: im})
		}
	}
	for _, w := range sweepW {
		for _, d := range Depths {
			if d == MainDepth {
				continue
			}
			for _, im := range sweep {
				cs = append(cs, Case{Workload: w, Depth: d, Producers: MainProducers, Impl: im})
			}
		}
		for _, n := range ProducerCounts {
			if n == MainProducers {
				continue
			}
			for _, im := range sweep {
				cs = append(cs, Case{Workload: w, Depth: MainDepth, Producers: n, Impl: im})
			}
		}
	}
	gs := []int{1}
	if g := runtime.GOMAXPROCS(0); g > 1 {
		gs = append(gs, g)
	}
	for _, im := range par {
		for _, g := range gs {
			cs = append(cs, Case{Workload: Replay, Depth: MainDepth, Producers: MainProducers, Impl: im, Goroutines: g})
		}
	}
	return cs
}

// available drops names that are not in Impls.
func available(names []string) []string {
	var out []string
	for _, n := range names {
		if _, ok := LookupImpl(n); ok {
			out = append(out, n)
		}
	}
	return out
}
