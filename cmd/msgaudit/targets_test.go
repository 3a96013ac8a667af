package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// passingReport is a hand-made report whose results meet every target by
// a margin, on 2 CPUs: the main cells, both sweeps, the heap rows and the
// concurrent pairs.
func passingReport() *benchReport {
	row := func(workload string, depth, producers int, impl string, ns float64) benchRow {
		return benchRow{Name: fmt.Sprintf("workload=%s/depth=%d/producers=%d/impl=%s", workload, depth, producers, impl),
			Impl: impl, Workload: workload, Depth: depth, Producers: producers, N: 1000, NsPerOp: ns}
	}
	par := func(impl string, g int, ns float64) benchRow {
		r := row("replay", 2048, 64, impl, ns)
		r.Name += fmt.Sprintf("/goroutines=%d", g)
		r.Goroutines = g
		return r
	}
	in := row("inorder", 2048, 64, "audit", 18)
	in.XFloor, in.JavaSpeedup = 1.3, 4.6
	re := row("replay", 2048, 64, "audit", 16)
	re.XFloor, re.JavaSpeedup = 1.2, 5.6
	return &benchReport{
		GOMAXPROCS: 2,
		Results: []benchRow{in, re,
			row("inorder", 64, 64, "audit", 18.3), row("inorder", 65536, 64, "audit", 19), // depth sweep
			row("inorder", 2048, 1, "audit", 17.2), row("inorder", 2048, 1024, "audit", 21.7), // producer sweep
			row("inorder", 64, 64, "map", 119), // not an audit: no sweep
			par("sharded", 1, 28), par("sharded", 2, 15), par("locked", 2, 31),
		},
		Memory: []benchMemRow{
			{Impl: "audit", Depth: 2048, Producers: 64, BytesPerProducer: 486, BytesPerID: 0.24},
			{Impl: "audit", Depth: 64, Producers: 64, BytesPerProducer: 238, BytesPerID: 3.7},
			{Impl: "map", Depth: 2048, Producers: 64, BytesPerProducer: 264970, BytesPerID: 129},
		},
	}
}

// TestEvaluateTargets breaks one measurement of a passing report at a time
// and checks that exactly the target it belongs to is missed.
func TestEvaluateTargets(t *testing.T) {
	t.Parallel()
	const (
		floorIn   = "audit.Audit ns/op <= 1.5x the floor-map floor (inorder)"
		floorRe   = "audit.Audit ns/op <= 1.5x the floor-map floor (replay)"
		allocsIn  = "audit.Audit allocates nothing per check (inorder)"
		javaRe    = "audit.Audit >= 4x faster than ActiveMQMessageAuditNoSync (replay)"
		flatDepth = "audit.Audit inorder ns/op within ±25% across the depth sweep"
		flatProd  = "audit.Audit inorder ns/op within ±25% across the producers sweep"
		heap64    = "audit.Audit heap bytes/producer <= depth/8+256 (depth=64, producers=64)"
		heapID    = "audit.Audit heap bytes/id >= 50x less than the map baseline's"
		scaling   = "audit.Sharded on 2 goroutines >= 1.6x the checks/s of 1 (replay)"
		vsLocked  = "audit.Sharded no slower than audit.Locked on 2 goroutines (replay)"
	)
	all := []string{floorIn, allocsIn, "audit.Audit >= 4x faster than ActiveMQMessageAuditNoSync (inorder)",
		floorRe, "audit.Audit allocates nothing per check (replay)", javaRe, flatDepth, flatProd,
		"audit.Audit heap bytes/producer <= depth/8+256 (depth=2048, producers=64)", heapID, heap64, scaling, vsLocked}
	find := func(rep *benchReport, name string) *benchRow {
		for i := range rep.Results {
			if rep.Results[i].Name == name {
				return &rep.Results[i]
			}
		}
		t.Fatalf("no row %s", name)
		return nil
	}
	main := func(w string) string { return "workload=" + w + "/depth=2048/producers=64/impl=audit" }
	for _, c := range []struct {
		name   string
		break_ func(*benchReport)
		missed []string
	}{
		{"all met", func(*benchReport) {}, nil},
		{"slower than 1.5x the floor", func(r *benchReport) { find(r, main("inorder")).XFloor = 1.51 }, []string{floorIn}},
		{"exactly 1.5x the floor is met", func(r *benchReport) { find(r, main("replay")).XFloor = 1.5 }, nil},
		{"an allocation per check", func(r *benchReport) { find(r, main("inorder")).AllocsPerOp = 1 }, []string{allocsIn}},
		{"under 4x ActiveMQ", func(r *benchReport) { find(r, main("replay")).JavaSpeedup = 3.9 }, []string{javaRe}},
		{"depth sweep not flat", func(r *benchReport) {
			find(r, "workload=inorder/depth=65536/producers=64/impl=audit").NsPerOp = 40
		}, []string{flatDepth}},
		{"producer sweep not flat", func(r *benchReport) {
			find(r, "workload=inorder/depth=2048/producers=1024/impl=audit").NsPerOp = 40
		}, []string{flatProd}},
		{"main cell slow in both sweeps", func(r *benchReport) { find(r, main("inorder")).NsPerOp = 40 }, []string{flatDepth, flatProd}},
		{"too much heap per producer", func(r *benchReport) { r.Memory[1].BytesPerProducer = 265 }, []string{heap64}},
		{"heap per id not 50x below the map's", func(r *benchReport) { r.Memory[0].BytesPerID = 2.6 }, []string{heapID}},
		{"sharded does not scale", func(r *benchReport) {
			find(r, "workload=replay/depth=2048/producers=64/impl=sharded/goroutines=2").NsPerOp = 18
		}, []string{scaling}},
		{"sharded slower than locked", func(r *benchReport) {
			find(r, "workload=replay/depth=2048/producers=64/impl=locked/goroutines=2").NsPerOp = 14
		}, []string{vsLocked}},
	} {
		t.Run(c.name, func(t *testing.T) {
			rep := passingReport()
			c.break_(rep)
			got := evaluateTargets(rep)
			var names, missed []string
			for _, g := range got {
				names = append(names, g.Target)
				if !g.Met {
					missed = append(missed, g.Target)
				}
			}
			if !slices.Equal(names, all) {
				t.Errorf("targets evaluated:\n  %s\nwant\n  %s", strings.Join(names, "\n  "), strings.Join(all, "\n  "))
			}
			if !slices.Equal(missed, c.missed) {
				t.Errorf("missed %q, want %q", missed, c.missed)
			}
		})
	}
}

// TestEvaluateTargetsLeavesOutWhatItCannotJudge: targets whose cases are
// absent are not reported (neither met nor missed).
func TestEvaluateTargetsLeavesOutWhatItCannotJudge(t *testing.T) {
	t.Parallel()
	if got := evaluateTargets(&benchReport{GOMAXPROCS: 2}); len(got) != 0 {
		t.Errorf("empty report: %+v", got)
	}
	rep := passingReport()
	rep.GOMAXPROCS = 1 // the goroutines=2 rows are not this run's parallel pair
	rep.Memory = nil
	for i := range rep.Results {
		rep.Results[i].JavaSpeedup = 0
	}
	for _, g := range evaluateTargets(rep) {
		if strings.Contains(g.Target, "Sharded") || strings.Contains(g.Target, "heap") || strings.Contains(g.Target, "ActiveMQ") {
			t.Errorf("judged without its cases: %+v", g)
		}
	}
}

// TestBenchCheck: --check turns a missed target, or a run on which no
// target can be judged, into exit status 1; without it the same runs exit
// 0 and only print MISSED.
func TestBenchCheck(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	save := func(name string, rep *benchReport) string {
		b, err := json.Marshal(rep)
		if err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, b, 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	good := save("good.json", passingReport())
	slow := passingReport()
	slow.Results[0].XFloor = 2
	bad := save("bad.json", slow)
	empty := save("empty.json", &benchReport{GOMAXPROCS: 2})
	for _, c := range []struct {
		args       []string
		code       int
		stdout     string // must appear in stdout
		stderr     string // must appear in stderr ("" = stderr empty)
		notInStdio string
	}{
		{[]string{"--from", good, "--check"}, 0, "met    audit.Audit ns/op <= 1.5x the floor-map floor (inorder): 1.30x", "", "MISSED"},
		{[]string{"--from", bad, "--check"}, 1, "MISSED audit.Audit ns/op <= 1.5x the floor-map floor (inorder): 2.00x",
			"--check: 1 of 13 performance targets missed: audit.Audit ns/op <= 1.5x the floor-map floor (inorder)", ""},
		{[]string{"--from", bad}, 0, "MISSED audit.Audit ns/op <= 1.5x the floor-map floor (inorder)", "", ""},
		{[]string{"--from", empty, "--check"}, 1, "msgaudit bench:", "--check: no performance target can be evaluated", "performance targets"},
		{[]string{"--from", empty}, 0, "msgaudit bench:", "", ""},
		{[]string{"--from", bad, "--check", "--benchstat", "-"}, 1, "goos: ", "1 of 13 performance targets missed", "MISSED"},
	} {
		code, stdout, stderr := runCmd(t, runBench, c.args...)
		if code != c.code {
			t.Errorf("%q: exit %d, want %d\nstdout:\n%s\nstderr:\n%s", c.args, code, c.code, stdout, stderr)
			continue
		}
		if !strings.Contains(stdout, c.stdout) {
			t.Errorf("%q: stdout lacks %q:\n%s", c.args, c.stdout, stdout)
		}
		if c.stderr == "" && stderr != "" || !strings.Contains(stderr, c.stderr) {
			t.Errorf("%q: stderr %q, want %q", c.args, stderr, c.stderr)
		}
		if c.notInStdio != "" && strings.Contains(stdout, c.notInStdio) {
			t.Errorf("%q: stdout has %q:\n%s", c.args, c.notInStdio, stdout)
		}
	}
}

// TestBenchCheckMeasuring: the measuring path returns --check's status too.
// The one case run is a floor, on which no target can be judged, so the
// exit status does not depend on the speed of the machine.
func TestBenchCheckMeasuring(t *testing.T) {
	args := []string{"--quiet", "--no-java", "--no-memory", "--benchtime", "1ms", "--run", "^workload=inorder/depth=64/producers=64/impl=floor-bit$"}
	if code, stdout, stderr := runCmd(t, runBench, args...); code != 0 {
		t.Fatalf("without --check: exit %d\n%s\n%s", code, stdout, stderr)
	}
	code, stdout, stderr := runCmd(t, runBench, append(args, "--check")...)
	if code != 1 || !strings.Contains(stderr, "no performance target can be evaluated") || !strings.Contains(stdout, "impl=floor-bit") {
		t.Fatalf("with --check: exit %d, want 1\n%s\n%s", code, stdout, stderr)
	}
}
