package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/acemq/msgaudit/audit"
	"github.com/acemq/msgaudit/bitsetbin"
	"github.com/acemq/msgaudit/cmd/msgaudit/internal/tune"
	"github.com/schollz/progressbar/v3"
)

const tuneUsage = `usage: msgaudit tune [flags] [TRACE]
       msgaudit tune --generate FILE [generator flags]

Replays a trace of message ids (TRACE, or standard input when TRACE is
absent or "-"; one id per line, optionally followed by a destination)
through audits over a grid of depth x producer cap, compares them with an
exact set of the ids, and recommends the smallest setting that catches
every duplicate (or --target of them), with --margin.

With --generate, writes a synthetic trace instead (FILE "-" = stdout).

Limits: --margin is a factor in [1, 1000]; --depths and --caps list at
most 64 values each; at most GOMAXPROCS workers run. Reading and replaying
hold about 5 times the trace's size in memory, plus each worker's audit
(the windows of one destination's producers). SIGINT and SIGTERM stop
reading, generating and replaying.

Flags:
`

// runTune is the "msgaudit tune" subcommand.
func runTune(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("tune", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(stderr, tuneUsage)
		fs.PrintDefaults()
	}
	var (
		depths   = fs.String("depths", "", "comma-separated window depths to try (default: powers of two up to twice the need)")
		caps     = fs.String("caps", "", "comma-separated producer caps to try (default: powers of two up to twice the producers)")
		target   = fs.Float64("target", 1, "fraction of the duplicates the setting must catch, in (0,1]")
		margin   = fs.Float64("margin", tune.DefaultMargin, "factor applied to the exact needs for the recommendation, in [1, 1000]")
		strict   = fs.Bool("strict", false, "fail on the first bad trace line instead of counting it")
		maxBad   = fs.Int("max-bad", tune.DefaultMaxBadLines, "bad lines to list (all are counted)")
		jsonOut  = fs.String("json", "", "also write the result as JSON to `FILE`")
		grid     = fs.Bool("grid", false, "list every grid cell, not just the caught-percentage matrix")
		quiet    = fs.Bool("quiet", false, "no progress bar")
		progress = fs.Bool("progress", false, "show the progress bar even when stderr is not a terminal")
		workers  = fs.Int("workers", 0, "cells replayed at once (default and at most GOMAXPROCS)")
		generate = fs.String("generate", "", "write a synthetic trace to `FILE` (\"-\" = stdout) and exit")
		gp       = fs.Int("producers", 64, "generate: producers, interleaved round-robin")
		gc       = fs.Int("count", 100000, "generate: distinct messages")
		gr       = fs.Float64("redelivery-rate", 0.01, "generate: probability of a redelivery after each message")
		gd       = fs.String("distance", "exp:500", "generate: redelivery distance: fixed:N | uniform:A-B | exp:MEAN")
		gdest    = fs.Int("destinations", 0, "generate: add a destination column with this many queues")
		gseed    = fs.Uint64("seed", 1, "generate: random seed")
	)
	if code, stop := parseFlags(fs, args, stderr); stop {
		return code
	}
	bad := func(format string, args ...any) int { return usageError(stderr, "tune", format, args...) }
	if *generate != "" {
		dist, err := tune.ParseDistribution(*gd)
		switch {
		case fs.NArg() > 0:
			return bad("-generate takes no trace argument (got %q)", fs.Args())
		case err != nil:
			return bad("-distance: %s", errText("tune", err))
		case *gp < 1:
			return bad("-producers %d: want at least 1", *gp)
		case *gc < 0:
			return bad("-count %d: want 0 or more", *gc)
		case !(*gr >= 0 && *gr <= 1):
			return bad("-redelivery-rate %v: want a probability in [0,1]", *gr)
		case *gdest < 0:
			return bad("-destinations %d: want 0 or more", *gdest)
		}
		return tuneGenerate(ctx, *generate, tune.GenerateOptions{Producers: *gp, Count: *gc, RedeliveryRate: *gr,
			Distance: dist, Destinations: *gdest, Seed: *gseed}, stdout, stderr)
	}
	if fs.NArg() > 1 {
		return bad("at most one trace file (got %q)", fs.Args())
	}
	o := tune.Options{Target: *target, Margin: *margin, Workers: *workers}
	var err error
	switch {
	case !(*target > 0 && *target <= 1):
		return bad("-target %v: want a fraction in (0,1]", *target)
	case !(*margin >= 1 && *margin <= maxTuneMargin):
		return bad("-margin %v: want a factor in [1, %d]", *margin, maxTuneMargin)
	case *workers < 0:
		return bad("-workers %d: want 0 (GOMAXPROCS) or more", *workers)
	case *maxBad < 0:
		return bad("-max-bad %d: want 0 or more", *maxBad)
	case *quiet && *progress:
		return bad("-quiet and -progress contradict each other")
	}
	if o.Depths, err = parseInts(*depths, 1, bitsetbin.MaxDepth, maxTuneAxis); err != nil {
		return bad("-depths %q: %v", *depths, err)
	}
	if o.Caps, err = parseInts(*caps, 1, audit.MaxProducersLimit, maxTuneAxis); err != nil {
		return bad("-caps %q: %v", *caps, err)
	}

	in, name := io.Reader(os.Stdin), "stdin"
	if p := fs.Arg(0); p != "" && p != "-" {
		f, err := os.Open(p)
		if err != nil {
			return failure(stderr, "tune", err)
		}
		defer f.Close()
		in, name = f, p
	}
	tr, err := tune.Read(ctx, in, tune.ReadOptions{Strict: *strict, MaxBadLines: *maxBad})
	if err != nil {
		return failure(stderr, "tune", fmt.Errorf("%s: %s", name, errText("tune", err)))
	}
	for _, b := range tr.BadLines {
		fmt.Fprintf(stderr, "%s:%d: %v\n", name, b.Line, b.Err)
	}
	if tr.Bad > len(tr.BadLines) {
		fmt.Fprintf(stderr, "%s: %d more bad lines not listed\n", name, tr.Bad-len(tr.BadLines))
	}
	if len(tr.Records) == 0 {
		return failure(stderr, "tune", fmt.Errorf("%s: no message ids (%d lines, %d bad)", name, tr.Lines, tr.Bad))
	}
	var bar *progressbar.ProgressBar
	if !*quiet {
		bar = newProgress(stderr, *progress, 1, "replaying")
	}
	if bar != nil {
		o.Progress = func(done, total int) {
			bar.ChangeMax(total)
			bar.Set(done)
		}
	}
	r, err := tune.Replay(ctx, tr, o)
	if bar != nil {
		bar.Finish()
	}
	if err != nil {
		if errors.Is(err, tune.ErrOptions) {
			return bad("%s", errText("tune", err))
		}
		return failure(stderr, "tune", err)
	}
	printTune(stdout, name, tr, r, *grid)
	if *jsonOut != "" {
		if err := writeJSON(*jsonOut, tuneJSON(name, tr, r)); err != nil {
			return failure(stderr, "tune", err)
		}
	}
	return exitOK
}

func tuneGenerate(ctx context.Context, path string, o tune.GenerateOptions, stdout, stderr io.Writer) int {
	w := stdout
	if path != "-" {
		f, err := os.Create(path)
		if err != nil {
			return failure(stderr, "tune", err)
		}
		defer f.Close()
		w = f
	}
	st, err := tune.Generate(ctx, w, o)
	if err != nil {
		if errors.Is(err, tune.ErrOptions) {
			return usageError(stderr, "tune", "%s", errText("tune", err))
		}
		return failure(stderr, "tune", err)
	}
	if c, ok := w.(io.Closer); ok && path != "-" {
		if err := c.Close(); err != nil {
			return failure(stderr, "tune", err)
		}
	}
	fmt.Fprintf(stderr, "msgaudit tune: wrote %d lines to %s: %d producers, %d redeliveries (distance %s, max %d), %d redeliveries skipped (beyond the producer's history)\n",
		st.Lines, path, o.Producers, st.Redeliveries, o.Distance, st.MaxDistance, st.Skipped)
	return 0
}

// The bounds tune.Replay enforces, checked here to name the flag.
const (
	maxTuneMargin = 1000
	maxTuneAxis   = 64
)

// parseInts parses a comma-separated list of at most most integers in
// [lo, hi].
func parseInts(s string, lo, hi, most int) ([]int, error) {
	if strings.TrimSpace(s) == "" {
		return nil, nil
	}
	fields := strings.Split(s, ",")
	if len(fields) > most {
		return nil, fmt.Errorf("%d values, want at most %d", len(fields), most)
	}
	var v []int
	for _, f := range fields {
		f = strings.TrimSpace(f)
		n, err := strconv.Atoi(f)
		if err != nil {
			return nil, fmt.Errorf("%q is not an integer", f)
		}
		if n < lo || n > hi {
			return nil, fmt.Errorf("%d not in %d..%d", n, lo, hi)
		}
		v = append(v, n)
	}
	return v, nil
}

func pct(n, d int) string {
	if d == 0 {
		return "-"
	}
	return strconv.FormatFloat(100*float64(n)/float64(d), 'f', 1, 64) + "%"
}

func printTune(w io.Writer, name string, tr *tune.Trace, r *tune.Result, full bool) {
	e := r.Exact
	fmt.Fprintf(w, "trace %s: %d lines, %d messages, %d duplicates (%s), %d producers, %d destination(s), %d bad lines\n",
		name, tr.Lines, e.Messages, e.Duplicates, pct(e.Duplicates, e.Messages), len(tr.Keys), e.Destinations, tr.Bad)
	if e.Duplicates == 0 {
		fmt.Fprintln(w, "no duplicates in the trace: nothing to size the window from")
	} else {
		fmt.Fprintf(w, "redelivery distance: p50 %d, p99 %d, max %d; up to %d producers per destination\n",
			e.DepthFor(0.5), e.DepthFor(0.99), e.MaxDistance(), e.Producers)
		fmt.Fprintf(w, "exact need for %s of the duplicates: depth >= %d, max producers >= %d\n",
			pct(int(r.Target*1000), 1000), r.NeedDepth, r.NeedCap)
	}
	fmt.Fprintln(w)
	if full {
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintln(tw, "depth\tmax-producers\tcaught\tmissed too-old\tmissed evicted\tfalse dups\tevictions\tmemory\t")
		for _, c := range r.Cells {
			fmt.Fprintf(tw, "%d\t%d\t%d\t%d\t%d\t%d\t%d\t%s\t\n", c.Depth, c.MaxProducers, c.Caught, c.MissedTooOld,
				c.MissedEvicted, c.FalseDuplicates, c.Evictions, bytesString(c.MemoryBytes))
		}
		tw.Flush()
	} else {
		printGrid(w, r)
	}
	fmt.Fprintln(w)
	describe := func(label string, c tune.Cell) {
		fmt.Fprintf(w, "%-12s depth %d, max producers %d: catches %d/%d (%s), missed %d too old + %d evicted, %d false duplicates, ~%s\n",
			label, c.Depth, c.MaxProducers, c.Caught, e.Duplicates, pct(c.Caught, e.Duplicates), c.MissedTooOld,
			c.MissedEvicted, c.FalseDuplicates, bytesString(c.MemoryBytes))
	}
	if r.Minimal != nil {
		describe("minimal:", *r.Minimal)
	} else {
		fmt.Fprintln(w, "minimal:     no grid cell meets the target; widen --depths/--caps")
	}
	describe("recommended:", r.Recommended)
	if e.Duplicates > 0 {
		fmt.Fprintf(w, "             margin %.2fx depth, %.2fx producers over the exact need\n", r.MarginDepth, r.MarginCap)
	}
	fmt.Fprintf(w, "             audit.Options{Depth: %d, MaxProducers: %d}\n", r.Recommended.Depth, r.Recommended.MaxProducers)
}

// printGrid prints the caught percentage per depth (rows) and cap
// (columns), marking cells that meet the target with '*'.
func printGrid(w io.Writer, r *tune.Result) {
	var depths, caps []int
	idx := map[[2]int]tune.Cell{}
	for _, c := range r.Cells {
		if len(depths) == 0 || depths[len(depths)-1] != c.Depth {
			depths = append(depths, c.Depth)
		}
		if len(depths) == 1 {
			caps = append(caps, c.MaxProducers)
		}
		idx[[2]int{c.Depth, c.MaxProducers}] = c
	}
	fmt.Fprintln(w, "caught duplicates by depth (rows) x max producers (columns); * meets the target")
	tw := tabwriter.NewWriter(w, 0, 0, 1, ' ', tabwriter.AlignRight)
	fmt.Fprint(tw, "depth\\cap\t")
	for _, c := range caps {
		fmt.Fprintf(tw, "%d\t", c)
	}
	fmt.Fprintln(tw)
	need := int(r.Target*float64(r.Exact.Duplicates) + 0.999999)
	for _, d := range depths {
		fmt.Fprintf(tw, "%d\t", d)
		for _, cp := range caps {
			c := idx[[2]int{d, cp}]
			mark := " "
			if c.Caught >= need && c.FalseDuplicates == 0 {
				mark = "*"
			}
			fmt.Fprintf(tw, "%s%s\t", pct(c.Caught, r.Exact.Duplicates), mark)
		}
		fmt.Fprintln(tw)
	}
	tw.Flush()
}

func bytesString(b int64) string {
	switch {
	case b >= 1<<30:
		return fmt.Sprintf("%.1f GiB", float64(b)/(1<<30))
	case b >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20))
	case b >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(b)/(1<<10))
	}
	return fmt.Sprintf("%d B", b)
}

type tuneCellJSON struct {
	Depth           int    `json:"depth"`
	MaxProducers    int    `json:"max_producers"`
	Caught          int    `json:"caught"`
	MissedTooOld    int    `json:"missed_too_old"`
	MissedEvicted   int    `json:"missed_evicted"`
	FalseDuplicates int    `json:"false_duplicates"`
	NewTooOld       int    `json:"new_too_old"`
	Evictions       uint64 `json:"evictions"`
	RecentEvictions uint64 `json:"recent_evictions"`
	Producers       int    `json:"producers_tracked"`
	MemoryBytes     int64  `json:"memory_bytes_estimate"`
}

type tuneBadJSON struct {
	Line  int    `json:"line"`
	Text  string `json:"text"`
	Error string `json:"error"`
}

type tuneResultJSON struct {
	Trace       string         `json:"trace"`
	Lines       int            `json:"lines"`
	BadLines    int            `json:"bad_lines"`
	Bad         []tuneBadJSON  `json:"bad,omitempty"`
	Messages    int            `json:"messages"`
	Duplicates  int            `json:"duplicates"`
	Producers   int            `json:"producers_per_destination"`
	Dests       int            `json:"destinations"`
	MaxDistance uint64         `json:"max_distance"`
	Target      float64        `json:"target"`
	Margin      float64        `json:"margin"`
	NeedDepth   int            `json:"need_depth"`
	NeedCap     int            `json:"need_max_producers"`
	Minimal     *tuneCellJSON  `json:"minimal"`
	Recommended tuneCellJSON   `json:"recommended"`
	Cells       []tuneCellJSON `json:"cells"`
}

func cellJSON(c tune.Cell) tuneCellJSON {
	return tuneCellJSON{c.Depth, c.MaxProducers, c.Caught, c.MissedTooOld, c.MissedEvicted, c.FalseDuplicates,
		c.NewTooOld, c.Evictions, c.RecentEvictions, c.Producers, c.MemoryBytes}
}

func tuneJSON(name string, tr *tune.Trace, r *tune.Result) tuneResultJSON {
	j := tuneResultJSON{Trace: name, Lines: tr.Lines, BadLines: tr.Bad, Messages: r.Exact.Messages,
		Duplicates: r.Exact.Duplicates, Producers: r.Exact.Producers, Dests: r.Exact.Destinations,
		MaxDistance: r.Exact.MaxDistance(), Target: r.Target, Margin: r.Margin, NeedDepth: r.NeedDepth,
		NeedCap: r.NeedCap, Recommended: cellJSON(r.Recommended)}
	for _, b := range tr.BadLines {
		j.Bad = append(j.Bad, tuneBadJSON{b.Line, b.Text, b.Err.Error()})
	}
	if r.Minimal != nil {
		m := cellJSON(*r.Minimal)
		j.Minimal = &m
	}
	for _, c := range r.Cells {
		j.Cells = append(j.Cells, cellJSON(c))
	}
	return j
}

// writeJSON writes v, indented, to path ("-" = stdout is not offered: the
// table goes there).
func writeJSON(path string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}
