package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/acemq/msgaudit/cmd/msgaudit/internal/benchreport"
)

// report is a hand-made report: the audit's inorder main cell and both
// sweeps, a map baseline point, and rows the chart leaves out (another
// workload, parallel rows).
func report() *benchreport.Report {
	row := func(workload string, depth, producers int, impl string, ns float64) benchreport.Row {
		return benchreport.Row{Impl: impl, Workload: workload, Depth: depth, Producers: producers, N: 1000, NsPerOp: ns}
	}
	par := row("replay", 2048, 64, "sharded", 15)
	par.Goroutines = 2
	parIn := row("inorder", 2048, 64, "locked", 31)
	parIn.Goroutines = 2
	return &benchreport.Report{
		Profile: "full", Rounds: 3, BenchTime: "500ms", GoVersion: "go1.26.0", CPU: "test CPU", GOMAXPROCS: 2,
		Results: []benchreport.Row{row("inorder", 2048, 64, "audit", 18), row("replay", 2048, 64, "audit", 16),
			row("inorder", 64, 64, "audit", 18.3), row("inorder", 65536, 64, "audit", 19), // depth sweep
			row("inorder", 2048, 1, "audit", 17.2), row("inorder", 2048, 1024, "audit", 21.7), // producer sweep
			row("inorder", 64, 64, "map", 119),
			par, parIn,
		},
	}
}

// TestChartData: every implementation with inorder results gets a series
// in the panel of its sweep, ActiveMQ's points included; rows of other
// workloads, parallel rows and failed rows are left out; the audit is drawn
// unlike the floor it costs about the same as.
func TestChartData(t *testing.T) {
	t.Parallel()
	rep := report()
	rep.Results = append(rep.Results,
		benchreport.Row{Impl: "floor-parse", Workload: "inorder", Depth: 2048, Producers: 64, NsPerOp: 18.9},
		benchreport.Row{Impl: "floor-parse", Workload: "inorder", Depth: 64, Producers: 64, NsPerOp: 18.5},
		benchreport.Row{Impl: "locked", Workload: "inorder", Depth: 2048, Producers: 64, NsPerOp: 23.8},
		benchreport.Row{Impl: "lru", Workload: "inorder", Depth: 2048, Producers: 64, Error: "failed"},
	)
	rep.Java = []benchreport.JavaRow{{Impl: "activemq-nosync", Workload: "inorder", Depth: 2048, Producers: 64, NsPerOp: 86.7},
		{Impl: "activemq-nosync", Workload: "replay", Depth: 2048, Producers: 64, NsPerOp: 91.1}}
	byDepth, byProd := chartData(rep)
	count := func(p chartPanel) map[string]int {
		m := map[string]int{}
		for impl, xys := range p.series {
			m[impl] = len(xys)
		}
		return m
	}
	wantDepth := map[string]int{"audit": 3, "floor-parse": 2, "locked": 1, "map": 1, "activemq-nosync": 1}
	wantProd := map[string]int{"audit": 3, "floor-parse": 1, "locked": 1, "activemq-nosync": 1}
	for _, c := range []struct {
		name string
		got  map[string]int
		want map[string]int
	}{{"depth", count(byDepth), wantDepth}, {"producers", count(byProd), wantProd}} {
		if len(c.got) != len(c.want) {
			t.Errorf("%s panel: series %v, want %v", c.name, c.got, c.want)
		}
		for impl, n := range c.want {
			if c.got[impl] != n {
				t.Errorf("%s panel: %s has %d points, want %d (all: %v)", c.name, impl, c.got[impl], n, c.got)
			}
		}
	}
	if xs := byDepth.series["audit"]; xs[0].X != 64 || xs[2].X != 65536 {
		t.Errorf("audit by depth not sorted: %v", xs)
	}
	if lo, hi := yRange(byDepth, byProd); lo != 17.2 || hi != 119 {
		t.Errorf("y range %v..%v, want the smallest and largest ns/op (17.2..119)", lo, hi)
	}
	a, _ := styleOf("audit")
	f, _ := styleOf("floor-parse")
	if a.line.Color == f.line.Color || a.line.Width <= f.line.Width || len(a.line.Dashes) != 0 || len(f.line.Dashes) == 0 || a.glyph.Shape == f.glyph.Shape {
		t.Errorf("audit and floor-parse look alike: %+v / %+v", a, f)
	}
	for _, impl := range chartDrawOrder {
		if _, ok := styleOf(impl); !ok {
			t.Errorf("%s is drawn but has no style", impl)
		}
	}
	if len(chartDrawOrder) != len(chartStyles) {
		t.Errorf("%d implementations drawn, %d styled", len(chartDrawOrder), len(chartStyles))
	}
	caption := strings.Join(chartCaption(rep, map[string]bool{"locked": true, "activemq-nosync": true}), " ")
	for _, want := range []string{"floor-bit only sets a bit", "floor-map adds", "floor-parse adds", "Baselines",
		"measured at depth 2048 with 64 producers only: audit.Locked, ActiveMQMessageAuditNoSync."} {
		if !strings.Contains(caption, want) {
			t.Errorf("caption lacks %q:\n%s", want, caption)
		}
	}
	png := filepath.Join(t.TempDir(), "c.png")
	if err := writeBenchPNG(png, rep); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(png); err != nil || !bytes.HasPrefix(b, []byte("\x89PNG\r\n\x1a\n")) {
		t.Fatalf("png: %v, %d bytes", err, len(b))
	}
	if err := writeBenchPNG(png, &benchreport.Report{}); err == nil {
		t.Error("an empty report charted without error")
	}
}

// TestRun: the command reads a report written as msgaudit bench --json
// writes it and draws the PNG; a missing file, a file that is no report,
// a report without inorder results and a bad command line fail.
func TestRun(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	js, png := filepath.Join(dir, "b.json"), filepath.Join(dir, "b.png")
	b, err := json.Marshal(report())
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(js, b, 0o644); err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	if code := run([]string{"-o", png, js}, &stderr); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	if p, err := os.ReadFile(png); err != nil || !bytes.HasPrefix(p, []byte("\x89PNG\r\n\x1a\n")) {
		t.Fatalf("png: %v, %d bytes", err, len(p))
	}
	empty := filepath.Join(dir, "empty.json")
	if err := os.WriteFile(empty, []byte(`{"results":[]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	notJSON := filepath.Join(dir, "table.txt")
	if err := os.WriteFile(notJSON, []byte("msgaudit bench: full profile"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"-o", png, filepath.Join(dir, "missing.json")}, 1, "no such file"},
		{[]string{"-o", png, notJSON}, 1, "table.txt"},
		{[]string{"-o", png, empty}, 1, "no inorder results"},
		{[]string{}, 2, "want one report"},
		{[]string{"-nosuch", js}, 2, "-nosuch"},
		{[]string{"-h"}, 0, "usage: benchchart"},
	} {
		stderr.Reset()
		if code := run(tt.args, &stderr); code != tt.code || !strings.Contains(stderr.String(), tt.want) {
			t.Errorf("benchchart %q: exit %d, %q; want exit %d and %q", tt.args, code, stderr.String(), tt.code, tt.want)
		}
	}
}
