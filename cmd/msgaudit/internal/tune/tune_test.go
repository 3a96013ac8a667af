package tune_test

import (
	"bytes"
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/acemq/msgaudit/cmd/msgaudit/internal/benchkit"
	"github.com/acemq/msgaudit/cmd/msgaudit/internal/tune"
	"github.com/acemq/msgaudit/internal/testkit/testwait"
	"pgregory.net/rapid"
)

// fataler is what generate needs of *testing.T and *rapid.T.
type fataler interface {
	Helper()
	Fatal(args ...any)
}

func generate(t fataler, o tune.GenerateOptions) (*tune.Trace, tune.GenerateStats) {
	t.Helper()
	var buf bytes.Buffer
	st, err := tune.Generate(context.Background(), &buf, o)
	if err != nil {
		t.Fatal(err)
	}
	tr, err := tune.Read(context.Background(), &buf, tune.ReadOptions{Strict: true})
	if err != nil {
		t.Fatal(err)
	}
	return tr, st
}

func cellAt(t *testing.T, r *tune.Result, depth, cp int) tune.Cell {
	t.Helper()
	for _, c := range r.Cells {
		if c.Depth == depth && c.MaxProducers == cp {
			return c
		}
	}
	t.Fatalf("no cell depth=%d cap=%d in the grid", depth, cp)
	return tune.Cell{}
}

func TestRead(t *testing.T) {
	t.Parallel()
	k := benchkit.ProducerKey(1)
	tests := []struct {
		name      string
		in        string
		records   int
		dests     []string
		bad       int
		badLines  []int
		strictErr int // line of the strict-mode error, 0 = none
	}{
		{"empty", "", 0, nil, 0, nil, 0},
		{"ids", k + ":1\n" + k + ":2\n", 2, []string{""}, 0, nil, 0},
		{"no final newline", k + ":1\n" + k + ":2", 2, []string{""}, 0, nil, 0},
		{"crlf", k + ":1\r\n" + k + ":2\r\n", 2, []string{""}, 0, nil, 0},
		{"comments and blanks", "# trace\n\n  \n" + k + ":1\n", 1, []string{""}, 0, nil, 0},
		{"destinations", k + ":1 /queue/a\n" + k + ":1\t/queue/b\n", 2, []string{"/queue/a", "/queue/b"}, 0, nil, 0},
		{"leading zeros", k + ":1\n" + k + ":01\n", 1, []string{""}, 1, []int{2}, 2},
		{"no colon", "abc\n" + k + ":1\n", 1, []string{""}, 1, []int{1}, 1},
		{"not a number", k + ":x\n", 0, nil, 1, []int{1}, 1},
		{"three fields", k + ":1 a b\n", 0, nil, 1, []int{1}, 1},
		{"several bad", "x\n" + k + ":1\ny\n\nz:\n", 1, []string{""}, 3, []int{1, 3, 5}, 1},
		{"long id", k + ":1\n" + strings.Repeat("a", 2000) + ":1\n", 1, []string{""}, 1, []int{2}, 2},
		{"line longer than the reader buffer", strings.Repeat("a", 200000) + "\n" + k + ":3\n", 1, []string{""}, 1, []int{1}, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			tr, err := tune.Read(context.Background(), strings.NewReader(tt.in), tune.ReadOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if len(tr.Records) != tt.records || tr.Bad != tt.bad {
				t.Fatalf("records %d bad %d, want %d and %d", len(tr.Records), tr.Bad, tt.records, tt.bad)
			}
			if len(tt.dests) > 0 && !equal(tr.Dests, tt.dests) {
				t.Errorf("dests %q, want %q", tr.Dests, tt.dests)
			}
			var lines []int
			for _, b := range tr.BadLines {
				lines = append(lines, b.Line)
				if b.Err == nil || len(b.Text) > 80 {
					t.Errorf("bad line %d: err %v, text %d bytes", b.Line, b.Err, len(b.Text))
				}
			}
			if !equal(lines, tt.badLines) {
				t.Errorf("bad lines %v, want %v", lines, tt.badLines)
			}
			_, err = tune.Read(context.Background(), strings.NewReader(tt.in), tune.ReadOptions{Strict: true})
			if tt.strictErr == 0 {
				if err != nil {
					t.Fatalf("strict: %v", err)
				}
				return
			}
			if !errors.Is(err, tune.ErrBadLine) || !strings.Contains(err.Error(), "line "+strconv.Itoa(tt.strictErr)+":") {
				t.Fatalf("strict: %v, want ErrBadLine at line %d", err, tt.strictErr)
			}
		})
	}
}

func TestReadKeepsOnlyMaxBadLines(t *testing.T) {
	t.Parallel()
	in := strings.Repeat("bad\n", 50)
	tr, err := tune.Read(context.Background(), strings.NewReader(in), tune.ReadOptions{MaxBadLines: 3})
	if err != nil {
		t.Fatal(err)
	}
	if tr.Bad != 50 || len(tr.BadLines) != 3 || tr.BadLines[2].Line != 3 {
		t.Fatalf("bad %d kept %d", tr.Bad, len(tr.BadLines))
	}
	tr, _ = tune.Read(context.Background(), strings.NewReader(in), tune.ReadOptions{MaxBadLines: -1})
	if tr.Bad != 50 || len(tr.BadLines) != 0 {
		t.Fatalf("bad %d kept %d", tr.Bad, len(tr.BadLines))
	}
}

type failingReader struct{}

func (failingReader) Read([]byte) (int, error) { return 0, errors.New("disk on fire") }

func TestReadError(t *testing.T) {
	t.Parallel()
	if _, err := tune.Read(context.Background(), failingReader{}, tune.ReadOptions{}); err == nil || !strings.Contains(err.Error(), "disk on fire") {
		t.Fatalf("got %v", err)
	}
}

// A redelivery distance of exactly 3000 needs depth >= 3000; 8 producers
// interleaved round-robin need a cap of 8.
func TestReplayKnownAnswer(t *testing.T) {
	t.Parallel()
	const producers = 8
	tr, st := generate(t, tune.GenerateOptions{Producers: producers, Count: producers * 5000, RedeliveryRate: 0.05,
		Distance: tune.Distribution{Kind: tune.Fixed, A: 3000}, Seed: 1})
	if st.Redeliveries == 0 || st.MaxDistance != 3000 {
		t.Fatalf("generated %+v", st)
	}
	r, err := tune.Replay(testwait.Context(t, time.Minute), tr, tune.Options{Depths: []int{2048, 2900, 3000, 4096}, Caps: []int{7, 8, 16}})
	if err != nil {
		t.Fatal(err)
	}
	dups := r.Exact.Duplicates
	if dups != st.Redeliveries || r.Exact.MaxDistance() != 3000 || r.Exact.Producers != producers {
		t.Fatalf("exact %d dups, max distance %d, %d producers", dups, r.Exact.MaxDistance(), r.Exact.Producers)
	}
	if r.NeedDepth != 3000 || r.NeedCap != producers {
		t.Fatalf("need depth %d cap %d, want 3000 and %d", r.NeedDepth, r.NeedCap, producers)
	}
	for _, c := range r.Cells {
		if c.FalseDuplicates != 0 {
			t.Errorf("%+v: false duplicates", c)
		}
		if c.Caught+c.Missed() != dups {
			t.Errorf("%+v: caught+missed != %d", c, dups)
		}
	}
	if c := cellAt(t, r, 2048, 8); c.MissedTooOld != dups || c.MissedEvicted != 0 {
		t.Errorf("depth 2048 cap 8: %+v, want all %d missed as too old", c, dups)
	}
	if c := cellAt(t, r, 3000, 8); c.Caught != dups {
		t.Errorf("depth 3000 cap 8: %+v, want all %d caught", c, dups)
	}
	if c := cellAt(t, r, 4096, 7); c.MissedEvicted != dups || c.Evictions == 0 {
		t.Errorf("depth 4096 cap 7: %+v, want all %d missed as evicted", c, dups)
	}
	if r.Minimal == nil || r.Minimal.Depth != 3000 || r.Minimal.MaxProducers != 8 {
		t.Errorf("minimal %+v, want depth 3000 cap 8", r.Minimal)
	}
	rec := r.Recommended
	if rec.Depth != 3750 || rec.MaxProducers != 10 || rec.Caught != dups || rec.MemoryBytes <= 0 {
		t.Errorf("recommended %+v, want depth 3750 cap 10 catching all", rec)
	}
	if r.MarginDepth < tune.DefaultMargin || r.MarginCap < tune.DefaultMargin {
		t.Errorf("margins %v %v", r.MarginDepth, r.MarginCap)
	}
}

// Each destination has its own audit: 12 producers over 3 queues need a
// cap of 4.
func TestReplayDestinations(t *testing.T) {
	t.Parallel()
	tr, _ := generate(t, tune.GenerateOptions{Producers: 12, Destinations: 3, Count: 12 * 400, RedeliveryRate: 0.2,
		Distance: tune.Distribution{Kind: tune.Uniform, A: 1, B: 100}, Seed: 2})
	r, err := tune.Replay(testwait.Context(t, time.Minute), tr, tune.Options{Caps: []int{3, 4}})
	if err != nil {
		t.Fatal(err)
	}
	if len(tr.Dests) != 3 || r.Exact.Producers != 4 || r.NeedCap != 4 {
		t.Fatalf("dests %d producers %d need cap %d", len(tr.Dests), r.Exact.Producers, r.NeedCap)
	}
	if c := cellAt(t, r, 128, 3); c.MissedEvicted == 0 {
		t.Errorf("cap 3: %+v, want evictions to lose duplicates", c)
	}
	if c := cellAt(t, r, 128, 4); c.Caught != r.Exact.Duplicates {
		t.Errorf("cap 4: %+v, want all %d caught", c, r.Exact.Duplicates)
	}
}

// With a target fraction, the needed depth is the distance quantile.
func TestReplayTarget(t *testing.T) {
	t.Parallel()
	tr, _ := generate(t, tune.GenerateOptions{Producers: 4, Count: 40000, RedeliveryRate: 0.1,
		Distance: tune.Distribution{Kind: tune.Uniform, A: 0, B: 999}, Seed: 3})
	r, err := tune.Replay(testwait.Context(t, time.Minute), tr, tune.Options{Target: 0.5, Margin: 1})
	if err != nil {
		t.Fatal(err)
	}
	if r.NeedDepth < 400 || r.NeedDepth > 600 {
		t.Errorf("need depth %d for half of uniform 0..999", r.NeedDepth)
	}
	if c := r.Recommended; float64(c.Caught) < 0.5*float64(r.Exact.Duplicates) {
		t.Errorf("recommended %+v catches less than half of %d", c, r.Exact.Duplicates)
	}
	if r.Minimal == nil {
		t.Fatal("no minimal cell")
	}
	for _, c := range r.Cells {
		if c.Depth < r.Minimal.Depth && c.MaxProducers >= r.Minimal.MaxProducers && 2*c.Caught >= r.Exact.Duplicates {
			t.Errorf("cell %+v is smaller than minimal %+v and meets the target", c, *r.Minimal)
		}
	}
}

func TestReplayNoDuplicates(t *testing.T) {
	t.Parallel()
	tr, _ := generate(t, tune.GenerateOptions{Producers: 100, Count: 1000, Seed: 4})
	r, err := tune.Replay(testwait.Context(t, time.Minute), tr, tune.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if r.Exact.Duplicates != 0 || r.NeedDepth != 0 || r.NeedCap != 0 {
		t.Fatalf("%+v", r)
	}
	if r.Recommended.Depth != 2048 || r.Recommended.MaxProducers != 125 {
		t.Errorf("recommended %+v, want the default depth and 100 producers × 1.25", r.Recommended)
	}
}

func TestReplayOptions(t *testing.T) {
	t.Parallel()
	tr, _ := generate(t, tune.GenerateOptions{Producers: 2, Count: 10})
	for _, o := range []tune.Options{
		{Target: 1.5}, {Target: -1}, {Margin: 0.5}, {Depths: []int{0}}, {Depths: []int{1 << 30}}, {Caps: []int{-1}},
	} {
		if _, err := tune.Replay(testwait.Context(t, time.Minute), tr, o); !errors.Is(err, tune.ErrOptions) {
			t.Errorf("%+v: %v, want ErrOptions", o, err)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	tr, _ = generate(t, tune.GenerateOptions{Producers: 2, Count: 10, RedeliveryRate: 1, Distance: tune.Distribution{Kind: tune.Fixed, A: 1}})
	if _, err := tune.Replay(ctx, tr, tune.Options{}); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled: %v", err)
	}
}

// Properties of any replay of a generated trace: every duplicate is
// caught or missed for one reason, the audit never invents a duplicate,
// and depth >= the largest distance with cap >= producers catches all.
func TestReplayProperties(t *testing.T) {
	t.Parallel()
	ctx := testwait.Context(t, 5*time.Minute) // for all of rapid's runs
	rapid.Check(t, func(rt *rapid.T) {
		o := tune.GenerateOptions{
			Producers:      rapid.IntRange(1, 6).Draw(rt, "producers"),
			Count:          rapid.IntRange(1, 3000).Draw(rt, "count"),
			RedeliveryRate: rapid.Float64Range(0, 1).Draw(rt, "rate"),
			Destinations:   rapid.IntRange(0, 2).Draw(rt, "destinations"),
			Seed:           rapid.Uint64().Draw(rt, "seed"),
		}
		a := uint64(rapid.IntRange(0, 300).Draw(rt, "a"))
		o.Distance = tune.Distribution{Kind: tune.Uniform, A: a, B: a + uint64(rapid.IntRange(0, 300).Draw(rt, "span"))}
		tr, st := generate(rt, o)
		depths := []int{rapid.IntRange(1, 700).Draw(rt, "depth")}
		caps := []int{rapid.IntRange(1, 8).Draw(rt, "cap")}
		r, err := tune.Replay(ctx, tr, tune.Options{Depths: depths, Caps: caps, Workers: 1})
		if err != nil {
			rt.Fatal(err)
		}
		e := r.Exact
		if e.Duplicates != st.Redeliveries || e.MaxDistance() != st.MaxDistance {
			rt.Fatalf("exact %d dups max %d, generated %+v", e.Duplicates, e.MaxDistance(), st)
		}
		for _, c := range append(r.Cells, r.Recommended) {
			if c.FalseDuplicates != 0 || c.NewTooOld != 0 {
				rt.Fatalf("%+v: false duplicates or new ids judged too old in an in-order trace", c)
			}
			if c.Caught+c.Missed() != e.Duplicates {
				rt.Fatalf("%+v: caught+missed != %d", c, e.Duplicates)
			}
			if c.MaxProducers >= e.Producers && c.MissedEvicted != 0 {
				rt.Fatalf("%+v: evictions with cap >= %d producers", c, e.Producers)
			}
			if c.MaxProducers >= e.Producers && uint64(c.Depth) >= e.MaxDistance() && c.Caught != e.Duplicates {
				rt.Fatalf("%+v: depth and cap suffice but %d of %d caught", c, c.Caught, e.Duplicates)
			}
		}
		if e.Duplicates > 0 && r.Recommended.Caught != e.Duplicates {
			rt.Fatalf("recommended %+v misses some of %d", r.Recommended, e.Duplicates)
		}
	})
}

func TestParseDistribution(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in   string
		want tune.Distribution
		ok   bool
	}{
		{"fixed:3000", tune.Distribution{Kind: tune.Fixed, A: 3000}, true},
		{"fixed:0", tune.Distribution{Kind: tune.Fixed}, true},
		{"uniform:10-20", tune.Distribution{Kind: tune.Uniform, A: 10, B: 20}, true},
		{"uniform:5-5", tune.Distribution{Kind: tune.Uniform, A: 5, B: 5}, true},
		{"exp:500", tune.Distribution{Kind: tune.Exponential, A: 500}, true},
		{"fixed", tune.Distribution{}, false},
		{"fixed:-1", tune.Distribution{}, false},
		{"fixed:x", tune.Distribution{}, false},
		{"uniform:20-10", tune.Distribution{}, false},
		{"uniform:10", tune.Distribution{}, false},
		{"exp:0", tune.Distribution{}, false},
		{"normal:5", tune.Distribution{}, false},
		{"fixed:99999999999999999999", tune.Distribution{}, false},
	}
	for _, tt := range tests {
		got, err := tune.ParseDistribution(tt.in)
		if tt.ok != (err == nil) || got != tt.want {
			t.Errorf("%q: %+v, %v", tt.in, got, err)
			continue
		}
		if !tt.ok {
			if !errors.Is(err, tune.ErrDistribution) {
				t.Errorf("%q: %v, want ErrDistribution", tt.in, err)
			}
			continue
		}
		if got.String() != tt.in {
			t.Errorf("String() = %q, want %q", got.String(), tt.in)
		}
	}
}

func TestGenerate(t *testing.T) {
	t.Parallel()
	o := tune.GenerateOptions{Producers: 3, Count: 7, RedeliveryRate: 1, Distance: tune.Distribution{Kind: tune.Fixed, A: 1}, Destinations: 2}
	var a, b bytes.Buffer
	st, err := tune.Generate(context.Background(), &a, o)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tune.Generate(context.Background(), &b, o); err != nil || a.String() != b.String() {
		t.Fatalf("not deterministic: %v", err)
	}
	k := func(p int) string { return benchkit.ProducerKey(p) }
	want := k(1) + ":1 /queue/q0\n" + k(2) + ":1 /queue/q1\n" + k(3) + ":1 /queue/q0\n" +
		k(1) + ":2 /queue/q0\n" + k(1) + ":1 /queue/q0\n" +
		k(2) + ":2 /queue/q1\n" + k(2) + ":1 /queue/q1\n" +
		k(3) + ":2 /queue/q0\n" + k(3) + ":1 /queue/q0\n" +
		k(1) + ":3 /queue/q0\n" + k(1) + ":2 /queue/q0\n"
	if a.String() != want {
		t.Fatalf("got\n%s\nwant\n%s", a.String(), want)
	}
	if st.Lines != 11 || st.Redeliveries != 4 || st.Skipped != 3 || st.MaxDistance != 1 {
		t.Fatalf("stats %+v", st)
	}
	for _, bad := range []tune.GenerateOptions{{Producers: -1}, {Count: -1}, {RedeliveryRate: 2}, {Destinations: -1}} {
		if _, err := tune.Generate(context.Background(), &b, bad); !errors.Is(err, tune.ErrOptions) {
			t.Errorf("%+v: %v", bad, err)
		}
	}
}

func TestMeasurePerProducer(t *testing.T) {
	// Not parallel: a heap measurement. The figure is not asserted beyond
	// its floor; the window bits alone are depth/8 bytes.
	for _, d := range []int{64, 2048, 65536} {
		if b := tune.MeasurePerProducer(d, 40); b < float64(d)/8 {
			t.Errorf("depth %d: %v bytes per producer, below the window bits", d, b)
		}
	}
}

func equal[T comparable](a, b []T) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
