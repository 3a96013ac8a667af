package receiver

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/acemq/msgaudit/idempotency"
	"github.com/acemq/msgaudit/internal/testkit/testwait"
)

// TestGroupStoreChoice: the in-process memory store is grouped only when
// asked to, any other BatchStore by default, and never with StoreBatch 1.
func TestGroupStoreChoice(t *testing.T) {
	t.Parallel()
	mem := memStore(t, idempotency.Options{})
	other := struct{ *idempotency.Memory }{mem} // a BatchStore that is not *Memory
	for _, c := range []struct {
		cfg     Config
		grouped bool
	}{
		{Config{Store: mem}, false},
		{Config{Store: mem, StoreBatch: 1}, false},
		{Config{Store: mem, StoreBatch: 16}, true},
		{Config{Store: other}, true},
		{Config{Store: other, StoreBatch: 1}, false},
	} {
		got, err := groupStore(c.cfg)
		if err != nil {
			t.Fatalf("groupStore(%T, StoreBatch %d): %v", c.cfg.Store, c.cfg.StoreBatch, err)
		}
		if grouped := got != c.cfg.Store; grouped != c.grouped {
			t.Errorf("groupStore(%T, StoreBatch %d) grouped = %v, want %v", c.cfg.Store, c.cfg.StoreBatch, grouped, c.grouped)
		}
	}
}

// TestGroupStoreRefused: options idempotency.Group refuses are an error
// wrapping both ErrConfig and idempotency.ErrOptions, not a panic. New
// checks StoreBatch and StoreLinger first; this is the guard behind it.
func TestGroupStoreRefused(t *testing.T) {
	t.Parallel()
	mem := memStore(t, idempotency.Options{})
	for _, cfg := range []Config{
		{Store: mem, StoreBatch: -1},
		{Store: mem, StoreBatch: 16, StoreLinger: -time.Millisecond},
		{Store: mem, StoreBatch: 16, SettleTimeout: -time.Second},
	} {
		s, err := groupStore(cfg)
		if s != nil || !errors.Is(err, ErrConfig) || !errors.Is(err, idempotency.ErrOptions) {
			t.Errorf("groupStore(StoreBatch %d, StoreLinger %v, SettleTimeout %v) = %v, %v; want ErrConfig and ErrOptions",
				cfg.StoreBatch, cfg.StoreLinger, cfg.SettleTimeout, s, err)
		}
	}
}

// memStore returns a Memory with options o, failing tb if NewMemory refuses
// them.
func memStore(tb testing.TB, o idempotency.Options) *idempotency.Memory {
	tb.Helper()
	m, err := idempotency.NewMemory(o)
	if err != nil {
		tb.Fatalf("NewMemory(%+v): %v", o, err)
	}
	return m
}

// TestRenewerExitsWhenIdle: the renewal goroutine runs while claims are
// held and is gone once the last one settles.
func TestRenewerExitsWhenIdle(t *testing.T) {
	t.Parallel()
	ctx := testwait.Context(t, time.Minute)
	mem := memStore(t, idempotency.Options{})
	sel, err := newStoreSelector(mem, storeOptions{RenewEvery: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	running := func() bool {
		sel.renewals.mu.Lock()
		defer sel.renewals.mu.Unlock()
		return sel.renewals.running
	}
	var ds []Decision
	for i := range 3 {
		d, err := sel.Select(ctx, &Message{Key: "ID:idle:" + string(rune('a'+i)), Destination: "/queue/q"})
		if err != nil || d.Verdict != Accept {
			t.Fatalf("Select = %+v, %v", d, err)
		}
		ds = append(ds, d)
	}
	if !running() {
		t.Fatal("no renewal goroutine with three claims held")
	}
	for _, d := range ds[:2] {
		if err := d.Settle(ctx, Completed); err != nil {
			t.Fatal(err)
		}
	}
	if !running() {
		t.Fatal("the renewal goroutine left with a claim still held")
	}
	// A Context hook made, then settled: the handler context ends.
	hctx := ds[2].Context(context.Background())
	if err := ds[2].Settle(ctx, Failed); err != nil {
		t.Fatal(err)
	}
	if hctx.Err() == nil {
		t.Fatal("the handler context outlived the settle")
	}
	testwait.Until(t, testwait.Long, "the renewal goroutine's exit", func() bool { return !running() })
	sel.renewals.mu.Lock()
	n := len(sel.renewals.heap)
	sel.renewals.mu.Unlock()
	if n != 0 {
		t.Fatalf("%d claims still scheduled after every settle", n)
	}
}
