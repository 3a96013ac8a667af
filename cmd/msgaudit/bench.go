package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"regexp"
	"runtime"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/acemq/msgaudit/cmd/msgaudit/internal/bench"
	"github.com/acemq/msgaudit/cmd/msgaudit/internal/benchkit"
	"github.com/acemq/msgaudit/cmd/msgaudit/internal/benchreport"
	"github.com/schollz/progressbar/v3"
)

const benchUsage = `usage: msgaudit bench [flags]

Runs the benchmark matrix (ours, the map and LRU baselines, the floor; in
order, replay, out of order, churn, jumps; depth 64 ... 1<<20, producers
1 ... 1024; the concurrent audits on 1 and GOMAXPROCS goroutines), measures
the heap per producer, and runs ActiveMQ's Java audit on the same workload
when java, javac and libactivemq-java are installed. Prints a table and
the performance targets (met or MISSED); optionally writes JSON and
benchstat lines. The chart of a JSON report is drawn by a command of its
own: go run ./cmd/msgaudit/benchchart -o bench.png bench.json. With --check the exit status is 1 when a target
is missed or none could be evaluated (a --run subset may leave none).

Flags:
`

// The report's types, shared with the chart command.
type (
	benchReport   = benchreport.Report
	benchRow      = benchreport.Row
	benchMemRow   = benchreport.MemRow
	benchJavaRow  = benchreport.JavaRow
	benchTargetOK = benchreport.Target
)

// Bounds of bench's flags: -count at most 100 rounds, -benchtime at most a
// minute per benchmark.
const (
	maxBenchRounds = 100
	maxBenchTime   = time.Minute
)

// runBench is the "msgaudit bench" subcommand.
func runBench(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(stderr, benchUsage)
		fs.PrintDefaults()
	}
	var (
		quick     = fs.Bool("quick", false, "the quick profile (under 30 s on 2 cores): main cells, inorder sweeps, scaling pair")
		benchtime = fs.Duration("benchtime", 0, "target time per benchmark, at most 1m (default 60ms quick, 1s full)")
		run       = fs.String("run", "", "only cases whose name matches this `regexp`")
		jsonOut   = fs.String("json", "", "write the results as JSON to `FILE`")
		benchstat = fs.String("benchstat", "", "write benchstat-compatible lines to `FILE` (\"-\" = stdout, instead of the table)")
		noJava    = fs.Bool("no-java", false, "skip ActiveMQ's Java audit even when java is installed")
		noMem     = fs.Bool("no-memory", false, "skip the heap measurements")
		quiet     = fs.Bool("quiet", false, "no progress bar")
		progress  = fs.Bool("progress", false, "show the progress bar even when stderr is not a terminal")
		from      = fs.String("from", "", "do not measure: print the results saved in `FILE` by --json")
		rounds    = fs.Int("count", 1, "measure every case this many times (at most 100), interleaved, keeping the fastest (3 steadies a loaded machine)")
		check     = fs.Bool("check", false, "exit 1 when a performance target is missed or none could be evaluated (also with --from)")
	)
	if code, stop := parseFlags(fs, args, stderr); stop {
		return code
	}
	if fs.NArg() > 0 {
		return usageError(stderr, "bench", "unexpected arguments: %q", fs.Args())
	}
	if *quiet && *progress {
		return usageError(stderr, "bench", "-quiet and -progress contradict each other")
	}
	if *from != "" {
		return benchFromFile(*from, *benchstat, *check, stdout, stderr)
	}
	profile := benchkit.Full
	if *quick {
		profile = benchkit.Quick
	}
	if *benchtime == 0 {
		*benchtime = time.Second
		if *quick {
			*benchtime = 60 * time.Millisecond
		}
	}
	if *rounds < 1 || *rounds > maxBenchRounds {
		return usageError(stderr, "bench", "-count must be in 1..%d, got %d", maxBenchRounds, *rounds)
	}
	if *benchtime < 0 {
		return usageError(stderr, "bench", "-benchtime must be positive, got %v", *benchtime)
	}
	if *benchtime > maxBenchTime {
		return usageError(stderr, "bench", "-benchtime must be at most %v, got %v", maxBenchTime, *benchtime)
	}
	var re *regexp.Regexp
	if *run != "" {
		var err error
		if re, err = regexp.Compile(*run); err != nil {
			return usageError(stderr, "bench", "-run: %v", err)
		}
	}
	cases := benchkit.Matrix(profile)
	mems := benchkit.MemMatrix(profile)
	if *noMem {
		mems = nil
	}
	if re != nil {
		cases = filter(cases, func(c benchkit.Case) bool { return re.MatchString(c.Name()) })
		mems = filter(mems, func(c benchkit.MemCase) bool { return re.MatchString(c.Name()) })
	}
	jo := bench.JavaOptions{}
	if *quick {
		jo.Impls = []string{"activemq-nosync"}
		jo.Runs, jo.Warmup = 5, 5
	}
	javaErr := jo.Check()
	if *noJava {
		javaErr = errors.New("skipped (--no-java)")
	}
	javaSteps := 0
	if javaErr == nil {
		javaSteps = len(jo.Impls)
		if javaSteps == 0 {
			javaSteps = len(bench.JavaImpls)
		}
	}
	if _, err := benchkit.SetBenchTime(*benchtime); err != nil {
		fmt.Fprintln(stderr, "msgaudit bench:", err)
		return 1
	}

	rep := &benchReport{Started: time.Now().UTC(), Profile: string(profile), BenchTime: benchtime.String(), Rounds: *rounds,
		GoVersion: runtime.Version(), GOOS: runtime.GOOS, GOARCH: runtime.GOARCH, CPU: cpuName(),
		GOMAXPROCS: runtime.GOMAXPROCS(0)}
	var bar *progressbar.ProgressBar
	if !*quiet {
		bar = newProgress(stderr, *progress, *rounds*len(cases)+len(mems)+javaSteps, "bench")
	}
	step := func(desc string) {
		if bar != nil {
			bar.Describe(desc)
			bar.Add(1)
		}
	}
	start := time.Now()
	results, err := benchkit.Run(ctx, cases, *rounds, func(r benchkit.Result) { step(r.Impl) })
	if err != nil {
		fmt.Fprintln(stderr, "msgaudit bench:", err)
		return 1
	}
	benchkit.ResetCache()
	var memRes []benchkit.MemResult
	for _, m := range mems {
		if err := ctx.Err(); err != nil {
			fmt.Fprintln(stderr, "msgaudit bench:", err)
			return 1
		}
		r, err := benchkit.MeasureMemory(m)
		if err != nil {
			rep.Memory = append(rep.Memory, benchMemRow{Name: m.Name(), Impl: m.Impl, Depth: m.Depth, Producers: m.Producers, Error: err.Error()})
		} else {
			memRes = append(memRes, r)
		}
		step("memory")
	}
	var javaRes []bench.JavaResult
	if javaErr == nil {
		for _, impl := range jo.Impls {
			o := jo
			o.Impls = []string{impl}
			rs, err := bench.RunJava(ctx, o)
			javaRes = append(javaRes, rs...)
			if err != nil {
				javaErr = err
			}
			step("java")
		}
		if len(jo.Impls) == 0 {
			javaRes, javaErr = bench.RunJava(ctx, jo)
			step("java")
		}
	}
	if bar != nil {
		bar.Finish()
	}
	rep.Seconds = time.Since(start).Seconds()
	buildReport(rep, results, memRes, javaRes, javaErr)

	failed := false
	for _, r := range rep.Results {
		if r.Error != "" {
			fmt.Fprintf(stderr, "msgaudit bench: %s: %s\n", r.Name, r.Error)
			failed = true
		}
	}
	if javaErr != nil && !*noJava {
		fmt.Fprintln(stderr, "msgaudit bench: ActiveMQ comparison:", javaErr)
	}
	if *benchstat == "-" {
		writeBenchstat(stdout, rep)
	} else {
		printBench(stdout, rep)
		if *benchstat != "" {
			if err := writeFileWith(*benchstat, func(w io.Writer) error { writeBenchstat(w, rep); return nil }); err != nil {
				fmt.Fprintln(stderr, "msgaudit bench:", err)
				return 1
			}
		}
	}
	if *jsonOut != "" {
		if err := writeJSON(*jsonOut, rep); err != nil {
			fmt.Fprintln(stderr, "msgaudit bench:", err)
			return 1
		}
	}
	if failed {
		return 1
	}
	return checkTargets(rep, *check, stderr)
}

// checkTargets is the exit status of --check: 1, with the reason on
// stderr, when a target was missed or none could be evaluated; 0 otherwise
// and always without --check.
func checkTargets(rep *benchReport, check bool, stderr io.Writer) int {
	if !check {
		return 0
	}
	if len(rep.Targets) == 0 {
		fmt.Fprintln(stderr, "msgaudit bench: --check: no performance target can be evaluated on these results (a --run subset without the main cells?)")
		return 1
	}
	var missed []string
	for _, t := range rep.Targets {
		if !t.Met {
			missed = append(missed, t.Target)
		}
	}
	if len(missed) > 0 {
		fmt.Fprintf(stderr, "msgaudit bench: --check: %d of %d performance targets missed: %s\n", len(missed), len(rep.Targets), strings.Join(missed, "; "))
		return 1
	}
	return 0
}

func filter[T any](v []T, keep func(T) bool) []T {
	var out []T
	for _, x := range v {
		if keep(x) {
			out = append(out, x)
		}
	}
	return out
}

// cpuName returns the CPU model from /proc/cpuinfo, or GOARCH.
func cpuName() string {
	b, err := os.ReadFile("/proc/cpuinfo")
	if err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if k, v, ok := strings.Cut(l, ":"); ok && strings.TrimSpace(k) == "model name" {
				return strings.TrimSpace(v)
			}
		}
	}
	return runtime.GOARCH
}

type cellKey struct {
	workload         string
	depth, producers int
}

// javaFor is the ActiveMQ audit each of ours is compared with: the
// unsynchronized one with NoSync, the thread-safe ones with the
// synchronized subclass; the baselines and floors with NoSync.
func javaFor(impl string) string {
	switch impl {
	case "locked", "sharded", "connaudit", "lru-locked":
		return "activemq-sync"
	}
	return "activemq-nosync"
}

func buildReport(rep *benchReport, results []benchkit.Result, mems []benchkit.MemResult, java []bench.JavaResult, javaErr error) {
	floor := map[cellKey]float64{}
	mapNs := map[cellKey]float64{}
	for _, r := range results {
		k := cellKey{string(r.Workload), r.Depth, r.Producers}
		if r.Err != nil || r.Goroutines != 0 {
			continue
		}
		switch r.Impl {
		case "floor-map":
			floor[k] = r.NsPerOp
		case "map":
			mapNs[k] = r.NsPerOp
		}
	}
	javaNs := map[string]float64{}
	for _, j := range java {
		javaNs[j.Name] = j.NsPerOp
		rep.Java = append(rep.Java, benchJavaRow{Name: j.Name, Impl: j.Impl, Workload: j.Workload, Depth: j.Depth,
			Producers: j.Producers, N: j.N, NsPerOp: j.NsPerOp, MedianNsPerOp: j.MedianNsPerOp, BytesPerOp: j.BytesPerOp,
			Duplicates: j.Duplicates, Expected: j.Expect})
	}
	if javaErr != nil {
		rep.JavaError = javaErr.Error()
	}
	memBy := map[string]float64{}
	for _, m := range mems {
		memBy[m.Name()] = m.BytesPerProducer
		rep.Memory = append(rep.Memory, benchMemRow{Name: m.Name(), Impl: m.Impl, Depth: m.Depth,
			Producers: m.Producers, Fill: m.Fill, Bytes: m.Bytes, BytesPerProducer: m.BytesPerProducer, BytesPerID: m.BytesPerID})
	}
	for _, r := range results {
		im, _ := benchkit.LookupImpl(r.Impl)
		row := benchRow{Name: r.Name(), Impl: r.Impl, Kind: string(im.Kind), Workload: string(r.Workload), Depth: r.Depth,
			Producers: r.Producers, Goroutines: r.Goroutines, N: r.N, NsPerOp: r.NsPerOp, AllocsPerOp: r.AllocsPerOp,
			BytesPerOp: r.BytesPerOp}
		if r.Err != nil {
			row.Error = r.Err.Error()
		} else if r.Goroutines == 0 {
			k := cellKey{string(r.Workload), r.Depth, r.Producers}
			if f, ok := floor[k]; ok && r.Impl != "floor-map" {
				row.XFloor = r.NsPerOp / f
			}
			if m, ok := mapNs[k]; ok && r.Impl != "map" {
				row.MapSpeedup = m / r.NsPerOp
			}
		}
		if r.Err == nil {
			jn := fmt.Sprintf("workload=%s/depth=%d/producers=%d/impl=%s", r.Workload, r.Depth, r.Producers, javaFor(r.Impl))
			if j, ok := javaNs[jn]; ok && (r.Goroutines <= 1) {
				row.JavaSpeedup = j / r.NsPerOp
			}
		}
		mk := benchkit.MemCase{Impl: r.Impl, Depth: r.Depth, Producers: r.Producers}.Name()
		if b, ok := memBy[mk]; ok {
			row.BytesProducer = &b
		}
		rep.Results = append(rep.Results, row)
	}
	rep.Targets = evaluateTargets(rep)
}

// evaluateTargets judges the report's results against msgaudit's
// performance targets, each named by what it requires:
//
//   - audit.Audit costs at most 1.5x the floor-map floor (producer-key map
//     lookup plus bit test-and-set) and allocates nothing, in order and on
//     replayed duplicates, at the main cell;
//   - it is at least 4x faster than ActiveMQ's ActiveMQMessageAuditNoSync on
//     the same workload (when the Java audit ran);
//   - its in-order cost stays within ±25% across the depth and the
//     producer sweeps;
//   - it keeps at most depth/8+256 bytes of heap per producer, and at least
//     50x less per id than the map baseline;
//   - audit.Sharded on GOMAXPROCS goroutines does at least 1.6x the
//     checks per second of one goroutine, and is never slower than
//     audit.Locked on as many goroutines.
//
// A target whose cases are not in the report is left out.
func evaluateTargets(rep *benchReport) []benchTargetOK {
	var ts []benchTargetOK
	find := func(name string) *benchRow {
		for i := range rep.Results {
			if rep.Results[i].Name == name && rep.Results[i].Error == "" {
				return &rep.Results[i]
			}
		}
		return nil
	}
	main := func(w, impl string) string {
		return fmt.Sprintf("workload=%s/depth=%d/producers=%d/impl=%s", w, benchkit.MainDepth, benchkit.MainProducers, impl)
	}
	for _, w := range []string{"inorder", "replay"} {
		if r := find(main(w, "audit")); r != nil {
			if r.XFloor > 0 {
				ts = append(ts, target("audit.Audit ns/op <= 1.5x the floor-map floor ("+w+")", fmt.Sprintf("%.2fx", r.XFloor), r.XFloor <= 1.5))
			}
			ts = append(ts, target("audit.Audit allocates nothing per check ("+w+")", fmt.Sprintf("%d allocs/op", r.AllocsPerOp), r.AllocsPerOp == 0))
			if r.JavaSpeedup > 0 {
				ts = append(ts, target("audit.Audit >= 4x faster than ActiveMQMessageAuditNoSync ("+w+")", fmt.Sprintf("%.2fx", r.JavaSpeedup), r.JavaSpeedup >= 4))
			}
		}
	}
	for _, axis := range []string{"depth", "producers"} {
		lo, hi := 0.0, 0.0
		n := 0
		for _, r := range rep.Results {
			if r.Impl != "audit" || r.Workload != "inorder" || r.Error != "" || r.Goroutines != 0 {
				continue
			}
			if (axis == "depth" && r.Producers != benchkit.MainProducers) || (axis == "producers" && r.Depth != benchkit.MainDepth) {
				continue
			}
			if n == 0 || r.NsPerOp < lo {
				lo = r.NsPerOp
			}
			hi = max(hi, r.NsPerOp)
			n++
		}
		if n > 1 {
			mid := (lo + hi) / 2
			spread := (hi - lo) / 2 / mid
			ts = append(ts, target("audit.Audit inorder ns/op within ±25% across the "+axis+" sweep", fmt.Sprintf("±%.0f%% (%.1f..%.1f ns/op)", 100*spread, lo, hi), spread <= 0.25))
		}
	}
	var mapID float64
	for _, m := range rep.Memory {
		if m.Error == "" && m.Impl == "map" && m.Depth == benchkit.MainDepth && m.Producers == benchkit.MainProducers {
			mapID = m.BytesPerID
		}
	}
	for _, m := range rep.Memory {
		if m.Error != "" || m.Impl != "audit" {
			continue
		}
		limit := float64(m.Depth)/8 + 256
		ts = append(ts, target(fmt.Sprintf("audit.Audit heap bytes/producer <= depth/8+256 (depth=%d, producers=%d)", m.Depth, m.Producers),
			fmt.Sprintf("%.0f (limit %.0f)", m.BytesPerProducer, limit), m.BytesPerProducer <= limit))
		if mapID > 0 && m.BytesPerID > 0 && m.Depth == benchkit.MainDepth && m.Producers == benchkit.MainProducers {
			x := mapID / m.BytesPerID
			ts = append(ts, target("audit.Audit heap bytes/id >= 50x less than the map baseline's", fmt.Sprintf("%.0fx", x), x >= 50))
		}
	}
	g := rep.GOMAXPROCS
	one := find(fmt.Sprintf("workload=replay/depth=%d/producers=%d/impl=sharded/goroutines=1", benchkit.MainDepth, benchkit.MainProducers))
	par := find(fmt.Sprintf("workload=replay/depth=%d/producers=%d/impl=sharded/goroutines=%d", benchkit.MainDepth, benchkit.MainProducers, g))
	lockedPar := find(fmt.Sprintf("workload=replay/depth=%d/producers=%d/impl=locked/goroutines=%d", benchkit.MainDepth, benchkit.MainProducers, g))
	if one != nil && par != nil && g > 1 {
		x := one.NsPerOp / par.NsPerOp
		ts = append(ts, target(fmt.Sprintf("audit.Sharded on %d goroutines >= 1.6x the checks/s of 1 (replay)", g), fmt.Sprintf("%.2fx", x), x >= 1.6))
	}
	if lockedPar != nil && par != nil {
		ts = append(ts, target(fmt.Sprintf("audit.Sharded no slower than audit.Locked on %d goroutines (replay)", g), fmt.Sprintf("%.1f vs %.1f ns/op", par.NsPerOp, lockedPar.NsPerOp), par.NsPerOp <= lockedPar.NsPerOp))
	}
	return ts
}

// target is a performance target judged: what it requires, what the run
// measured, and whether that meets it.
func target(name, value string, met bool) benchTargetOK {
	return benchTargetOK{Target: name, Value: value, Met: met}
}

func fmtRatio(x float64) string {
	if x == 0 {
		return "-"
	}
	return fmt.Sprintf("%.2fx", x)
}

func printBench(w io.Writer, rep *benchReport) {
	fmt.Fprintf(w, "msgaudit bench: %s profile, benchtime %s, best of %d, %s, %s/%s, %d CPUs (GOMAXPROCS), %s; %.0f s\n",
		rep.Profile, rep.BenchTime, rep.Rounds, rep.GoVersion, rep.GOOS, rep.GOARCH, rep.GOMAXPROCS, rep.CPU, rep.Seconds)
	if rep.Note != "" {
		fmt.Fprintln(w, "("+rep.Note+")")
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "case\tns/op\tallocs/op\tB/op\tbytes/producer\tx floor\tmap/this\tjava/this\t")
	for _, r := range rep.Results {
		if r.Error != "" {
			fmt.Fprintf(tw, "%s\tFAILED\t\t\t\t\t\t\t\n", r.Name)
			continue
		}
		bp := "-"
		if r.BytesProducer != nil {
			bp = fmt.Sprintf("%.0f", *r.BytesProducer)
		}
		fmt.Fprintf(tw, "%s\t%.1f\t%d\t%d\t%s\t%s\t%s\t%s\t\n", r.Name, r.NsPerOp, r.AllocsPerOp, r.BytesPerOp, bp,
			fmtRatio(r.XFloor), fmtRatio(r.MapSpeedup), fmtRatio(r.JavaSpeedup))
	}
	tw.Flush()
	fmt.Fprintln(w, "\nx floor = ns/op ÷ floor-map (producer-key map lookup + bit test-and-set) on the same workload;")
	fmt.Fprintln(w, "map/this, java/this = the map baseline's / ActiveMQ's ns/op ÷ this one's (speedup; the thread-safe audits")
	fmt.Fprintln(w, "against ActiveMQMessageAudit, the rest against ActiveMQMessageAuditNoSync).")
	if len(rep.Memory) > 0 {
		fmt.Fprintln(w, "\nheap retained after GC (in-order ids, fresh strings):")
		tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintln(tw, "case\tids/producer\tbytes\tbytes/producer\tbytes/id\t")
		for _, m := range rep.Memory {
			if m.Error != "" {
				fmt.Fprintf(tw, "%s\tFAILED: %s\t\t\t\t\n", m.Name, m.Error)
				continue
			}
			fmt.Fprintf(tw, "%s\t%d\t%d\t%.0f\t%.3f\t\n", m.Name, m.Fill, m.Bytes, m.BytesPerProducer, m.BytesPerID)
		}
		tw.Flush()
	}
	if len(rep.Java) > 0 {
		fmt.Fprintln(w, "\nActiveMQ (Java, libactivemq-java), same workload, best and median of the timed runs:")
		tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintln(tw, "case\tns/op\tmedian ns/op\tB/op\tduplicates\t")
		for _, j := range rep.Java {
			fmt.Fprintf(tw, "%s\t%.1f\t%.1f\t%.1f\t%d/%d\t\n", j.Name, j.NsPerOp, j.MedianNsPerOp, j.BytesPerOp, j.Duplicates, j.Expected)
		}
		tw.Flush()
	} else if rep.JavaError != "" {
		fmt.Fprintf(w, "\nActiveMQ comparison not run: %s\n", rep.JavaError)
	}
	if len(rep.Targets) > 0 {
		fmt.Fprintln(w, "\nperformance targets (msgaudit bench --check exits 1 on a miss):")
		for _, t := range rep.Targets {
			mark := "MISSED"
			if t.Met {
				mark = "met"
			}
			fmt.Fprintf(w, "  %-6s %s: %s\n", mark, t.Target, t.Value)
		}
	}
}

// writeBenchstat writes the results in the Go benchmark format, with the
// header benchstat uses to group them.
func writeBenchstat(w io.Writer, rep *benchReport) {
	fmt.Fprintf(w, "goos: %s\ngoarch: %s\npkg: github.com/acemq/msgaudit/bench\ncpu: %s\n", rep.GOOS, rep.GOARCH, rep.CPU)
	suffix := ""
	if rep.GOMAXPROCS > 1 {
		suffix = fmt.Sprintf("-%d", rep.GOMAXPROCS)
	}
	for _, r := range rep.Results {
		if r.Error != "" {
			continue
		}
		fmt.Fprintf(w, "BenchmarkCheck/%s%s \t%d\t%.2f ns/op\t%d B/op\t%d allocs/op\n", r.Name, suffix, r.N, r.NsPerOp, r.BytesPerOp, r.AllocsPerOp)
	}
	for _, m := range rep.Memory {
		if m.Error != "" {
			continue
		}
		fmt.Fprintf(w, "BenchmarkMemory/%s%s \t1\t%.1f bytes/producer\t%.4f bytes/id\n", m.Name, suffix, m.BytesPerProducer, m.BytesPerID)
	}
	for _, j := range rep.Java {
		fmt.Fprintf(w, "BenchmarkCheck/%s%s \t%d\t%.2f ns/op\t%.0f B/op\n", j.Name, suffix, j.N, j.NsPerOp, j.BytesPerOp)
	}
}

func writeFileWith(path string, f func(io.Writer) error) error {
	fh, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := f(fh); err != nil {
		fh.Close()
		return err
	}
	return fh.Close()
}

// benchFromFile prints or converts a report saved with --json. The
// targets are judged again on the saved results, so a saved run is held to
// today's targets (and --check applies to it).
func benchFromFile(path, benchstat string, check bool, stdout, stderr io.Writer) int {
	b, err := os.ReadFile(path)
	if err != nil {
		fmt.Fprintln(stderr, "msgaudit bench:", err)
		return 1
	}
	var rep benchReport
	if err := json.Unmarshal(b, &rep); err != nil {
		fmt.Fprintf(stderr, "msgaudit bench: %s: %v\n", path, err)
		return 1
	}
	rep.Targets = evaluateTargets(&rep)
	if benchstat == "-" {
		writeBenchstat(stdout, &rep)
	} else {
		printBench(stdout, &rep)
		if benchstat != "" {
			if err := writeFileWith(benchstat, func(w io.Writer) error { writeBenchstat(w, &rep); return nil }); err != nil {
				fmt.Fprintln(stderr, "msgaudit bench:", err)
				return 1
			}
		}
	}
	return checkTargets(&rep, check, stderr)
}
