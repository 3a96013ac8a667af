package connaudit_test

import (
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/acemq/msgaudit/audit"
	"github.com/acemq/msgaudit/connaudit"
)

// checker is what the parallel benchmark drives: the connection audit and
// two hand-written baselines.
type checker interface {
	Check(consumer string, d connaudit.Destination, id string) (audit.Sighting, error)
}

// globalLock serialises every destination behind one mutex, as ActiveMQ's
// synchronized ConnectionAudit.isDuplicate does.
type globalLock struct {
	mu sync.Mutex
	m  map[connaudit.Destination]*audit.Audit
}

func (g *globalLock) Check(_ string, d connaudit.Destination, id string) (audit.Sighting, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	a := g.m[d]
	if a == nil {
		a, _ = audit.New(audit.Options{MaxProducers: benchCap})
		g.m[d] = a
	}
	return a.Check(id)
}

// rwMap finds the destination's audit under a read lock and checks it
// under the audit's own mutex.
type rwMap struct {
	mu sync.RWMutex
	m  map[connaudit.Destination]*audit.Locked
}

func (r *rwMap) Check(_ string, d connaudit.Destination, id string) (audit.Sighting, error) {
	r.mu.RLock()
	a := r.m[d]
	r.mu.RUnlock()
	if a == nil {
		r.mu.Lock()
		if a = r.m[d]; a == nil {
			a, _ = audit.NewLocked(audit.Options{MaxProducers: benchCap})
			r.m[d] = a
		}
		r.mu.Unlock()
	}
	return a.Check(id)
}

// benchCap is the producer cap of every audit in the parallel benchmark:
// room for all goroutines' producers on one destination (no churn).
const benchCap = 1024

func benchIDs(g, n int) []string {
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("ID:host-%d-1700000000000-1:1:1:%d:%d", 41234+g, i%64, i/64+1)
	}
	return ids
}

// BenchmarkCheck is one goroutine checking in-order ids of 64 producers
// on one queue and on one topic subscription.
func BenchmarkCheck(b *testing.B) {
	for _, d := range []connaudit.Destination{qQ, qT} {
		b.Run("dest="+d.Kind.String(), func(b *testing.B) {
			a := mustNew(b, connaudit.Options{})
			ids := benchIDs(0, 1<<14)
			b.ReportAllocs()
			b.ResetTimer()
			j := 0
			for range b.N {
				if _, err := a.Check("c1", d, ids[j]); err != nil {
					b.Fatal(err)
				}
				if j++; j == len(ids) {
					j = 0
				}
			}
		})
	}
}

// BenchmarkParallel drives b.RunParallel goroutines, goroutine g checking
// its own producers on destination g mod destinations, through the
// connection audit and through the two baselines. Compare -cpu=1,2.
func BenchmarkParallel(b *testing.B) {
	maxG := 4 * runtime.GOMAXPROCS(0)
	lists := make([][]string, maxG)
	for g := range lists {
		lists[g] = benchIDs(g, 1<<13)
	}
	impls := []struct {
		name string
		make func() checker
	}{
		{"connaudit", func() checker { return mustNew(b, connaudit.Options{MaxProducers: benchCap}) }},
		{"connaudit-sharded", func() checker { return mustNew(b, connaudit.Options{MaxProducers: benchCap, Shards: 4 * benchCap}) }},
		{"globallock", func() checker { return &globalLock{m: map[connaudit.Destination]*audit.Audit{}} }},
		{"rwmutex", func() checker { return &rwMap{m: map[connaudit.Destination]*audit.Locked{}} }},
	}
	for _, dests := range []int{1, 8} {
		for _, impl := range impls {
			b.Run(fmt.Sprintf("impl=%s/destinations=%d", impl.name, dests), func(b *testing.B) {
				c := impl.make()
				var next atomic.Int64
				b.ReportAllocs()
				b.ResetTimer()
				b.RunParallel(func(pb *testing.PB) {
					g := int(next.Add(1)-1) % maxG
					d := connaudit.Destination{Kind: connaudit.Queue, Name: fmt.Sprintf("q%d", g%dests)}
					ids := lists[g]
					i := 0
					for pb.Next() {
						if _, err := c.Check("c", d, ids[i]); err != nil {
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
}
