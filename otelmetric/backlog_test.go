package otelmetric_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/acemq/msgaudit/idempotency"
	"github.com/acemq/msgaudit/otelmetric"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
)

var knownBacklog = idempotency.Backlog{Held: 3, OldestHeld: 1500 * time.Millisecond, Rows: 4000, OldestRow: 90 * time.Second}

// countingSample returns a sample function that counts its calls and
// returns knownBacklog.
func countingSample(n *atomic.Int64) func(context.Context) (idempotency.Backlog, error) {
	return func(context.Context) (idempotency.Backlog, error) {
		n.Add(1)
		return knownBacklog, nil
	}
}

// clock is a settable clock.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }

func (c *clock) add(d time.Duration) { c.mu.Lock(); c.now = c.now.Add(d); c.mu.Unlock() }

// TestBacklog: every backlog instrument is collected with the value of
// its own field and the attribute store, and the kind, description and
// unit of the table.
func TestBacklog(t *testing.T) {
	t.Parallel()
	r, mp := newReader(t)
	var n atomic.Int64
	if _, err := otelmetric.Backlog(mp.Meter("test"), countingSample(&n), "pg"); err != nil {
		t.Fatal(err)
	}
	got := collect(t, r)
	wants := []want{
		{"msgaudit_backlog_held", "store=pg", 3}, {"msgaudit_backlog_oldest_held_seconds", "store=pg", 1.5},
		{"msgaudit_backlog_rows", "store=pg", 4000}, {"msgaudit_backlog_oldest_row_seconds", "store=pg", 90},
		{"msgaudit_backlog_sample_errors_total", "store=pg", 0},
	}
	check(t, got, wants)
	if len(got) != len(wants) {
		t.Errorf("%d instruments collected, want %d", len(got), len(wants))
	}
}

// TestBacklogCache: a collection within 10 s of the last sample reuses it;
// the first after takes a new one. A failed sample counts in
// sample_errors_total and leaves the last good values; before any good
// sample the gauges report nothing.
func TestBacklogCache(t *testing.T) {
	t.Parallel()
	r, mp := newReader(t)
	clk := &clock{now: time.Unix(1e9, 0)}
	var calls atomic.Int64
	var mu sync.Mutex
	next, fail := knownBacklog, errors.New("connection refused")
	sample := func(context.Context) (idempotency.Backlog, error) {
		calls.Add(1)
		mu.Lock()
		defer mu.Unlock()
		return next, fail
	}
	set := func(b idempotency.Backlog, err error) { mu.Lock(); next, fail = b, err; mu.Unlock() }
	if _, err := otelmetric.BacklogAt(mp.Meter("test"), sample, "pg", clk.Now); err != nil {
		t.Fatal(err)
	}
	step := func(what string, wantCalls int64, wantHeld float64, wantErrors float64) {
		t.Helper()
		got := collect(t, r)
		if calls.Load() != wantCalls {
			t.Errorf("%s: %d samples taken, want %d", what, calls.Load(), wantCalls)
		}
		held, ok := got["msgaudit_backlog_held"].points["store=pg"]
		if wantHeld < 0 {
			if ok {
				t.Errorf("%s: held reported (%v) before any good sample", what, held)
			}
		} else if !ok || held != wantHeld {
			t.Errorf("%s: held %v (present %v), want %v", what, held, ok, wantHeld)
		}
		if e := got["msgaudit_backlog_sample_errors_total"].points["store=pg"]; e != wantErrors {
			t.Errorf("%s: sample_errors_total %v, want %v", what, e, wantErrors)
		}
	}
	step("a failing first sample", 1, -1, 1)
	clk.add(10 * time.Second)
	set(knownBacklog, nil)
	step("10 s later, a good sample", 2, 3, 1)
	clk.add(9 * time.Second)
	set(idempotency.Backlog{Held: 7}, nil)
	step("9 s later, the cached sample", 2, 3, 1)
	clk.add(time.Second)
	step("10 s after the last, a new sample", 3, 7, 1)
	clk.add(10 * time.Second)
	set(idempotency.Backlog{Held: 9}, errors.New("timeout"))
	step("a failing sample keeps the last good values", 4, 7, 2)
}

// TestBacklogDeadline: a sample runs with a deadline 2 s away.
func TestBacklogDeadline(t *testing.T) {
	t.Parallel()
	r, mp := newReader(t)
	var left time.Duration
	sample := func(ctx context.Context) (idempotency.Backlog, error) {
		d, ok := ctx.Deadline()
		if !ok {
			return idempotency.Backlog{}, errors.New("no deadline")
		}
		left = time.Until(d)
		return idempotency.Backlog{}, nil
	}
	if _, err := otelmetric.Backlog(mp.Meter("test"), sample, "pg"); err != nil {
		t.Fatal(err)
	}
	got := collect(t, r)
	if e := got["msgaudit_backlog_sample_errors_total"].points["store=pg"]; e != 0 {
		t.Fatalf("the sample failed: %v errors", e)
	}
	if left <= time.Second || left > 2*time.Second {
		t.Errorf("the sample had %v before its deadline, want 2 s", left)
	}
}

// TestBacklogOverlap: a collection while a sample runs (a second reader
// of the same MeterProvider: one reader's collections do not overlap)
// does not wait for it, nor start another: it reports what the running
// sample will replace (nothing before a first good sample), and the
// sample's values come with the collection that took it.
func TestBacklogOverlap(t *testing.T) {
	t.Parallel()
	r1, r2 := sdkmetric.NewManualReader(), sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(r1), sdkmetric.WithReader(r2))
	defer func() { _ = mp.Shutdown(context.Background()) }()
	entered, release := make(chan struct{}), make(chan struct{})
	var calls atomic.Int64
	sample := func(context.Context) (idempotency.Backlog, error) {
		if calls.Add(1) == 1 {
			close(entered)
			<-release
		}
		return knownBacklog, nil
	}
	if _, err := otelmetric.Backlog(mp.Meter("test"), sample, "pg"); err != nil {
		t.Fatal(err)
	}
	first := make(chan map[string]instrument, 1)
	go func() { first <- collect(t, r1) }()
	<-entered
	got := collect(t, r2)
	if _, ok := got["msgaudit_backlog_held"]; ok || calls.Load() != 1 {
		t.Errorf("a collection during the first sample: held reported %v, %d samples; want none and 1",
			ok, calls.Load())
	}
	close(release)
	got = <-first
	if v := got["msgaudit_backlog_held"].points["store=pg"]; v != 3 {
		t.Errorf("the collection that sampled: held %v, want 3", v)
	}
}
