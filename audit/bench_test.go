package audit_test

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"sync/atomic"
	"testing"

	"github.com/acemq/msgaudit/audit"
	"github.com/acemq/msgaudit/msgid"
)

// benchKey is an OpenWire-like producer key; producer p of goroutine g.
func benchKey(g, p int) string {
	return fmt.Sprintf("ID:host-%d-1700000000000-1:1:1:%d", 41234+g, p)
}

// inOrderIDs returns n ids of producers round-robin, each in order from 1.
func inOrderIDs(g, producers, n int) []string {
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("%s:%d", benchKey(g, i%producers), i/producers+1)
	}
	return ids
}

// idCount is how many ids a benchmark pre-generates (about 3 MB of ids).
const idCount = 1 << 16

type benchAuditor interface {
	Check(id string) (audit.Sighting, error)
	Rollback(id string) error
	Clear()
}

// runInOrder checks ids in order, each a first sighting on a tracked
// producer. When the list is exhausted it makes the ids new again with the
// timer stopped: by rolling every id back (no allocation, the windows stay
// where they are), or, with clear set (when a producer has more ids than
// the window holds, or the sequences jump), by clearing the audit and
// re-creating the producers.
func runInOrder(b *testing.B, a benchAuditor, ids []string, producers int, clear bool) {
	warm := func() {
		a.Clear()
		for _, id := range ids[:producers] {
			if _, err := a.Check(id); err != nil {
				b.Fatal(err)
			}
		}
	}
	reset := func() {
		if clear {
			warm()
			return
		}
		for _, id := range ids[producers:] {
			if err := a.Rollback(id); err != nil {
				b.Fatal(err)
			}
		}
	}
	warm()
	b.ReportAllocs()
	b.ResetTimer()
	i := producers
	for range b.N {
		if i == len(ids) {
			b.StopTimer()
			reset()
			i = producers
			b.StartTimer()
		}
		if v, _ := a.Check(ids[i]); v != audit.FirstSeen {
			b.Fatalf("%s: %v", ids[i], v)
		}
		i++
	}
}

// BenchmarkCheck measures the unsynchronized check of a string id on a
// tracked producer, in order, across producer counts (cap 1024) and depths.
func BenchmarkCheck(b *testing.B) {
	for _, p := range []int{1, 64, 1024} {
		b.Run(fmt.Sprintf("workload=inorder/producers=%d/depth=2048", p), func(b *testing.B) {
			a, _ := audit.New(audit.Options{MaxProducers: 1024})
			runInOrder(b, a, inOrderIDs(0, p, idCount), p, idCount/p > 2048)
		})
	}
	for _, d := range []int{64, 65536, 1 << 20} { // 2048: above
		b.Run(fmt.Sprintf("workload=inorder/producers=64/depth=%d", d), func(b *testing.B) {
			a, _ := audit.New(audit.Options{Depth: d})
			runInOrder(b, a, inOrderIDs(0, 64, idCount), 64, idCount/64 > d)
		})
	}
	b.Run("workload=replay/producers=64/depth=2048", func(b *testing.B) {
		// Replay of the last 1000 ids of each producer: all duplicates.
		a, _ := audit.New(audit.Options{})
		ids := inOrderIDs(0, 64, 64*1000)
		for _, id := range ids {
			_, _ = a.Check(id)
		}
		b.ReportAllocs()
		b.ResetTimer()
		j := 0
		for range b.N {
			if v, _ := a.Check(ids[j]); v != audit.Duplicate {
				b.Fatal(v)
			}
			if j++; j == len(ids) {
				j = 0
			}
		}
	})
	b.Run("workload=jumps/producers=64/depth=2048", func(b *testing.B) {
		// Every id jumps its producer forward by up to 1e12: each check
		// slides the window past all its history.
		r := rand.New(rand.NewPCG(1, 2))
		seqs := make([]uint64, 64)
		ids := make([]string, idCount)
		for i := range ids {
			p := i % 64
			seqs[p] += 4096 + r.Uint64N(1e12)
			ids[i] = fmt.Sprintf("%s:%d", benchKey(0, p), seqs[p])
		}
		a, _ := audit.New(audit.Options{})
		runInOrder(b, a, ids, 64, true)
	})
	b.Run("workload=outoforder/producers=64/depth=2048", func(b *testing.B) {
		// Each producer's ids shuffled within blocks of 1024.
		r := rand.New(rand.NewPCG(3, 4))
		ids := inOrderIDs(0, 64, idCount)
		const block = 64 * 1024
		for lo := 64; lo < len(ids); lo += block {
			hi := min(lo+block, len(ids))
			r.Shuffle(hi-lo, func(i, j int) { ids[lo+i], ids[lo+j] = ids[lo+j], ids[lo+i] })
		}
		a, _ := audit.New(audit.Options{})
		runInOrder(b, a, ids, 64, false)
	})
	b.Run("workload=churn/producers=128/cap=64", func(b *testing.B) {
		// Twice as many producers as the cap, round-robin: every check
		// evicts a producer and creates one.
		a, _ := audit.New(audit.Options{})
		ids := inOrderIDs(0, 128, idCount)
		b.ReportAllocs()
		b.ResetTimer()
		j := 0
		for range b.N {
			_, _ = a.Check(ids[j])
			if j++; j == len(ids) {
				j = 0
			}
		}
	})
}

// BenchmarkFloor is the limit of the design on the same ids: a bare bit
// test-and-set at a precomputed index; a map lookup of a pre-split producer
// key plus that bit op; and msgid.Split of the string id plus both.
func BenchmarkFloor(b *testing.B) {
	const producers = 64
	ids := inOrderIDs(0, producers, idCount)
	keys := make([]string, len(ids))
	seqs := make([]uint64, len(ids))
	for i, id := range ids {
		keys[i], seqs[i], _ = msgid.Split(id)
	}
	const words = 2048/64 + 1
	windows := make(map[string]*[words]uint64)
	for _, k := range keys[:producers] {
		windows[k] = new([words]uint64)
	}
	var dups int
	testAndSet := func(w *[words]uint64, seq uint64) {
		i := seq % (words * 64)
		bit := uint64(1) << (i & 63)
		if w[i>>6]&bit != 0 {
			dups++
		}
		w[i>>6] |= bit
	}
	b.Run("floor=bit", func(b *testing.B) {
		w := windows[keys[0]]
		b.ReportAllocs()
		j := 0
		for range b.N {
			testAndSet(w, seqs[j])
			if j++; j == len(seqs) {
				j = 0
			}
		}
	})
	b.Run("floor=map+bit", func(b *testing.B) {
		b.ReportAllocs()
		j := 0
		for range b.N {
			testAndSet(windows[keys[j]], seqs[j])
			if j++; j == len(keys) {
				j = 0
			}
		}
	})
	b.Run("floor=split+map+bit", func(b *testing.B) {
		b.ReportAllocs()
		j := 0
		for range b.N {
			k, s, err := msgid.Split(ids[j])
			if err != nil {
				b.Fatal(err)
			}
			testAndSet(windows[k], s)
			if j++; j == len(ids) {
				j = 0
			}
		}
	})
	runtime.KeepAlive(dups)
}

// BenchmarkParallel checks in-order ids from b.RunParallel goroutines,
// each with its own 64 producers, on the thread-safe audits. Run it with
// -cpu=1,2 to compare one and two goroutines. After a goroutine's ids are
// exhausted it replays them (duplicates: the same hot path).
func BenchmarkParallel(b *testing.B) {
	maxG := 4 * runtime.GOMAXPROCS(0)
	lists := make([][]string, maxG)
	for g := range lists {
		lists[g] = inOrderIDs(g, 64, idCount/4)
	}
	types := []struct {
		name string
		make func() benchAuditor
	}{
		{"Locked", func() benchAuditor { a, _ := audit.NewLocked(audit.Options{MaxProducers: 64 * maxG}); return a }},
		{"Sharded", func() benchAuditor { a, _ := audit.NewSharded(audit.Options{MaxProducers: 64 * maxG}, 0); return a }},
	}
	for _, ty := range types {
		b.Run("type="+ty.name, func(b *testing.B) {
			a := ty.make()
			var next atomic.Int64
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				ids := lists[int(next.Add(1)-1)%maxG]
				i := 0
				for pb.Next() {
					if _, err := a.Check(ids[i]); err != nil {
						b.Fatal(err)
					}
					if i++; i == len(ids) {
						i = 0
					}
				}
			})
		})
	}
}
