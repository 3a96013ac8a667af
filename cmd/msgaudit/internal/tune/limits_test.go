package tune_test

import (
	"errors"
	"math"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/acemq/msgaudit/audit"
	"github.com/acemq/msgaudit/bitsetbin"
	"github.com/acemq/msgaudit/cmd/msgaudit/internal/tune"
	"github.com/acemq/msgaudit/internal/testkit/testwait"
)

// TestReplayProducersPastTheCapLimit: a trace without duplicates whose
// producers times the margin pass the audit's producer limit gets a
// recommendation clamped to that limit, not a panic.
func TestReplayProducersPastTheCapLimit(t *testing.T) {
	// Not parallel: about a million producers tracked at once.
	const producers = 900_000 // × 1.25 > audit.MaxProducersLimit
	tr, _ := generate(t, tune.GenerateOptions{Producers: producers, Count: producers, Seed: 5})
	r, err := tune.Replay(testwait.Context(t, 5*time.Minute), tr, tune.Options{Depths: []int{64}, Caps: []int{1}, Workers: 1})
	if err != nil {
		t.Fatal(err)
	}
	if r.Recommended.MaxProducers != audit.MaxProducersLimit || r.Recommended.Producers != producers {
		t.Fatalf("recommended %+v, want max producers %d tracking %d", r.Recommended, audit.MaxProducersLimit, producers)
	}
}

// TestReplayMarginBounds: a margin that is not a finite factor in
// [1, 1000] is refused with ErrOptions naming the bound; the largest one
// recommends at least the need, clamped to the audit's limits.
func TestReplayMarginBounds(t *testing.T) {
	t.Parallel()
	tr, _ := generate(t, tune.GenerateOptions{Producers: 4, Count: 4000, RedeliveryRate: 0.05,
		Distance: tune.Distribution{Kind: tune.Fixed, A: 300}, Seed: 1})
	ctx := testwait.Context(t, time.Minute)
	for _, m := range []float64{1e308, math.Inf(1), math.NaN(), 1000.5, math.Inf(-1), -1} {
		_, err := tune.Replay(ctx, tr, tune.Options{Margin: m, Depths: []int{64}, Caps: []int{1}})
		if !errors.Is(err, tune.ErrOptions) || !strings.Contains(err.Error(), "[1, 1000]") {
			t.Errorf("margin %v: %v, want ErrOptions saying [1, 1000]", m, err)
		}
	}
	r, err := tune.Replay(ctx, tr, tune.Options{Margin: 1000, Depths: []int{64}, Caps: []int{1}})
	if err != nil {
		t.Fatal(err)
	}
	if rec := r.Recommended; rec.Depth != 300_000 || rec.MaxProducers != 4000 || rec.Caught != r.Exact.Duplicates {
		t.Fatalf("margin 1000: recommended %+v, want depth 300000, 4000 producers, every duplicate caught", rec)
	}
	// A margin that would overflow an int is refused above; at the bound,
	// a depth past the audit's limit is clamped to it.
	tr, _ = generate(t, tune.GenerateOptions{Producers: 1, Count: 40_000, RedeliveryRate: 1,
		Distance: tune.Distribution{Kind: tune.Fixed, A: 30_000}, Seed: 1})
	r, err = tune.Replay(ctx, tr, tune.Options{Margin: 1000, Depths: []int{64}, Caps: []int{1}})
	if err != nil {
		t.Fatal(err)
	}
	if r.Recommended.Depth != bitsetbin.MaxDepth {
		t.Fatalf("recommended depth %d, want the limit %d", r.Recommended.Depth, bitsetbin.MaxDepth)
	}
}

// TestReplayGridBounds: a grid axis longer than 64 values is refused, and
// more workers than GOMAXPROCS are not started (not parallel: it counts
// goroutines).
func TestReplayGridBounds(t *testing.T) {
	tr, _ := generate(t, tune.GenerateOptions{Producers: 2, Count: 100, RedeliveryRate: 0.5, Distance: tune.Distribution{Kind: tune.Fixed, A: 1}})
	ctx := testwait.Context(t, time.Minute)
	long := make([]int, 65)
	for i := range long {
		long[i] = i + 1
	}
	for _, o := range []tune.Options{{Depths: long}, {Caps: long}} {
		if _, err := tune.Replay(ctx, tr, o); !errors.Is(err, tune.ErrOptions) || !strings.Contains(err.Error(), "more than 64") {
			t.Errorf("65 values: %v, want ErrOptions saying more than 64", err)
		}
	}
	base := runtime.NumGoroutine()
	most := 0
	_, err := tune.Replay(ctx, tr, tune.Options{Depths: long[:64], Caps: []int{1, 2}, Workers: 1000,
		Progress: func(int, int) { most = max(most, runtime.NumGoroutine()-base) }})
	if err != nil {
		t.Fatal(err)
	}
	if most > runtime.GOMAXPROCS(0) {
		t.Fatalf("%d goroutines during the replay, want at most GOMAXPROCS = %d workers", most, runtime.GOMAXPROCS(0))
	}
}
