package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestChartData: every implementation with inorder results gets a series
// in the panel of its sweep, ActiveMQ's points included; rows of other
// workloads, parallel rows and failed rows are left out; the audit is drawn
// unlike the floor it costs about the same as.
func TestChartData(t *testing.T) {
	t.Parallel()
	rep := passingReport()
	rep.Results = append(rep.Results,
		benchRow{Impl: "floor-parse", Workload: "inorder", Depth: 2048, Producers: 64, NsPerOp: 18.9},
		benchRow{Impl: "floor-parse", Workload: "inorder", Depth: 64, Producers: 64, NsPerOp: 18.5},
		benchRow{Impl: "locked", Workload: "inorder", Depth: 2048, Producers: 64, NsPerOp: 23.8},
		benchRow{Impl: "lru", Workload: "inorder", Depth: 2048, Producers: 64, Error: "failed"},
	)
	rep.Java = []benchJavaRow{{Impl: "activemq-nosync", Workload: "inorder", Depth: 2048, Producers: 64, NsPerOp: 86.7},
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
	if err := writeBenchPNG(png, &benchReport{}); err == nil {
		t.Error("an empty report charted without error")
	}
}
