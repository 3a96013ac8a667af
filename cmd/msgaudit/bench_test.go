package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestBenchSubset runs a few cases end to end with a tiny benchtime: the
// table, the ratios, the memory section, JSON and benchstat output.
// Nothing about the measured speed is asserted.
func TestBenchSubset(t *testing.T) {
	dir := t.TempDir()
	js, bs := filepath.Join(dir, "b.json"), filepath.Join(dir, "b.txt")
	run := `^(workload=inorder/depth=(64|2048)/producers=64/impl=(audit|floor-map|map)|depth=64/producers=64/impl=audit)$`
	code, stdout, stderr := runCmd(t, runBench, "--quick", "--quiet", "--no-java", "--benchtime", "1ms", "--count", "2",
		"--run", run, "--json", js, "--benchstat", bs)
	if code != 0 {
		t.Fatalf("exit %d\n%s\n%s", code, stdout, stderr)
	}
	for _, want := range []string{
		"workload=inorder/depth=2048/producers=64/impl=audit",
		"workload=inorder/depth=64/producers=64/impl=map",
		"depth=64/producers=64/impl=audit",
		"heap retained after GC",
		"ActiveMQ comparison not run: skipped (--no-java)",
		"audit.Audit ns/op <= 1.5x the floor-map floor (inorder)",
		"performance targets (msgaudit bench --check exits 1 on a miss):",
		"best of 2",
	} {
		if !strings.Contains(stdout, want) {
			t.Errorf("output lacks %q", want)
		}
	}
	var rep benchReport
	b, err := os.ReadFile(js)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &rep); err != nil {
		t.Fatal(err)
	}
	if len(rep.Results) != 6 || len(rep.Memory) != 1 || rep.Rounds != 2 {
		t.Fatalf("%d results, %d memory rows, %d rounds", len(rep.Results), len(rep.Memory), rep.Rounds)
	}
	for _, r := range rep.Results {
		if r.Error != "" || r.N == 0 || r.NsPerOp <= 0 {
			t.Errorf("%+v", r)
		}
		if r.Impl == "audit" && (r.XFloor <= 0 || r.MapSpeedup <= 0) {
			t.Errorf("audit ratios missing: %+v", r)
		}
		if r.Impl == "audit" && r.Depth == 64 && r.BytesProducer == nil {
			t.Errorf("bytes/producer missing: %+v", r)
		}
	}
	code, again, stderr := runCmd(t, runBench, "--from", js)
	if code != 0 || again != stdout {
		t.Fatalf("--from: exit %d, %s\n%s\nwant\n%s", code, stderr, again, stdout)
	}
	s, err := os.ReadFile(bs)
	if err != nil {
		t.Fatal(err)
	}
	line := regexp.MustCompile(`(?m)^BenchmarkCheck/workload=inorder/depth=2048/producers=64/impl=audit(-\d+)? \t\d+\t[0-9.]+ ns/op\t\d+ B/op\t\d+ allocs/op$`)
	if !line.Match(s) || !strings.HasPrefix(string(s), "goos: ") {
		t.Fatalf("benchstat output:\n%s", s)
	}
}

func TestBenchUsageErrors(t *testing.T) {
	if code, _, _ := runCmd(t, runBench, "--from", filepath.Join(t.TempDir(), "missing.json")); code != 1 {
		t.Errorf("--from missing file: exit %d, want 1", code)
	}
	for _, args := range [][]string{{"--nope"}, {"extra"}, {"--run", "("}, {"--count", "0"}} {
		if code, _, _ := runCmd(t, runBench, args...); code != 2 {
			t.Errorf("%q: exit %d, want 2", args, code)
		}
	}
	if code, _, _ := runCmd(t, runBench, "-h"); code != 0 {
		t.Errorf("-h: exit %d", code)
	}
}

func TestBenchstatStdout(t *testing.T) {
	code, stdout, stderr := runCmd(t, runBench, "--quiet", "--no-java", "--no-memory", "--benchtime", "1ms", "--count", "1",
		"--run", "^workload=replay/depth=2048/producers=64/impl=audit$", "--benchstat", "-")
	if code != 0 || strings.Contains(stdout, "x floor") || !strings.Contains(stdout, "BenchmarkCheck/workload=replay/depth=2048/producers=64/impl=audit") {
		t.Fatalf("%d\n%s\n%s", code, stdout, stderr)
	}
}
