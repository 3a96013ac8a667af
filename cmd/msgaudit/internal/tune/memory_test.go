package tune_test

import (
	"bytes"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/acemq/msgaudit/cmd/msgaudit/internal/tune"
	"github.com/acemq/msgaudit/internal/testkit/testwait"
)

// peakHeap runs f and returns the largest heap in use (runtime.MemStats
// HeapAlloc, garbage not yet collected included) seen while it ran, above
// the heap in use before it started.
func peakHeap(f func()) uint64 {
	var before runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	var (
		wg   sync.WaitGroup
		peak uint64
		stop = make(chan struct{})
	)
	wg.Go(func() {
		var m runtime.MemStats
		for {
			runtime.ReadMemStats(&m)
			peak = max(peak, m.HeapAlloc)
			select {
			case <-stop:
				return
			case <-time.After(time.Millisecond):
			}
		}
	})
	f()
	close(stop)
	wg.Wait()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	peak = max(peak, m.HeapAlloc)
	return peak - min(peak, before.HeapAlloc)
}

// TestReplayMemoryManyDestinations: a trace of 100,000 destinations, one
// producer and one duplicate each, is read and replayed on 8 workers in at
// most 8 times its own size: the heap does not grow with destinations ×
// workers (every cell held an audit per destination, and the trace a map
// per destination, which took up to 190 times the trace).
func TestReplayMemoryManyDestinations(t *testing.T) {
	// Not parallel: a heap measurement, and it sets GOMAXPROCS.
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(8))
	const dests = 100_000
	var trace bytes.Buffer
	if _, err := tune.Generate(testwait.Context(t, time.Minute), &trace, tune.GenerateOptions{Producers: dests, Count: 2 * dests,
		Destinations: dests, RedeliveryRate: 1, Distance: tune.Distribution{Kind: tune.Fixed, A: 1}, Seed: 6}); err != nil {
		t.Fatal(err)
	}
	size := uint64(trace.Len())
	ctx := testwait.Context(t, 5*time.Minute)
	var r *tune.Result
	var err error
	peak := peakHeap(func() {
		var tr *tune.Trace
		if tr, err = tune.Read(ctx, &trace, tune.ReadOptions{}); err != nil {
			return
		}
		r, err = tune.Replay(ctx, tr, tune.Options{Depths: []int{64, 128}, Caps: []int{1, 2}})
	})
	if err != nil {
		t.Fatal(err)
	}
	if r.Exact.Destinations != dests || r.Exact.Duplicates != dests || r.Recommended.Caught != dests {
		t.Fatalf("%d destinations, %d duplicates, recommended %+v", r.Exact.Destinations, r.Exact.Duplicates, r.Recommended)
	}
	t.Logf("trace %d bytes, peak heap %d bytes (%.1f×)", size, peak, float64(peak)/float64(size))
	if peak > 8*size {
		t.Fatalf("peak heap %d bytes = %.1f× the trace's %d bytes, want at most 8×", peak, float64(peak)/float64(size), size)
	}
}
