package main

import (
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/acemq/msgaudit/cmd/msgaudit/internal/benchkit"
)

// TestFlagBounds: every subcommand refuses hostile numbers (NaN, ±Inf,
// negative counts, zero where it means nothing, values past a documented
// bound) before doing anything, with exit 2 and a first line naming the
// flag.
func TestFlagBounds(t *testing.T) {
	t.Parallel()
	k := benchkit.ProducerKey(1)
	trace := filepath.Join(t.TempDir(), "trace.txt")
	if err := os.WriteFile(trace, []byte(k+":1\n"+k+":2\n"+k+":1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	long := strings.TrimSuffix(strings.Repeat("64,", 65), ",")
	for _, tt := range []struct {
		args []string
		want string // the first line of stderr
	}{
		{[]string{"tune", "-margin", "1e308", trace}, "msgaudit tune: -margin 1e+308: want a factor in [1, 1000]"},
		{[]string{"tune", "-margin", "1001", trace}, "msgaudit tune: -margin 1001: want a factor in [1, 1000]"},
		{[]string{"tune", "-margin", "NaN", trace}, "msgaudit tune: -margin NaN: want a factor in [1, 1000]"},
		{[]string{"tune", "-margin", "Inf", trace}, "msgaudit tune: -margin +Inf: want a factor in [1, 1000]"},
		{[]string{"tune", "-margin", "-Inf", trace}, "msgaudit tune: -margin -Inf: want a factor in [1, 1000]"},
		{[]string{"tune", "-target", "NaN", trace}, "msgaudit tune: -target NaN: want a fraction in (0,1]"},
		{[]string{"tune", "-target", "Inf", trace}, "msgaudit tune: -target +Inf: want a fraction in (0,1]"},
		{[]string{"tune", "-target", "-0.5", trace}, "msgaudit tune: -target -0.5: want a fraction in (0,1]"},
		{[]string{"tune", "-workers", "-1", trace}, "msgaudit tune: -workers -1: want 0 (GOMAXPROCS) or more"},
		{[]string{"tune", "-max-bad", "-1", trace}, "msgaudit tune: -max-bad -1: want 0 or more"},
		{[]string{"tune", "-depths", long, trace}, "msgaudit tune: -depths \"" + long + "\": 65 values, want at most 64"},
		{[]string{"tune", "-caps", long, trace}, "msgaudit tune: -caps \"" + long + "\": 65 values, want at most 64"},
		{[]string{"tune", "-depths", "99999999999999999999", trace}, "msgaudit tune: -depths \"99999999999999999999\": \"99999999999999999999\" is not an integer"},
		{[]string{"tune", "-caps", "1048577", trace}, "msgaudit tune: -caps \"1048577\": 1048577 not in 1..1048576"},
		{[]string{"tune", "-generate", "-", "-redelivery-rate", "NaN"}, "msgaudit tune: -redelivery-rate NaN: want a probability in [0,1]"},
		{[]string{"tune", "-generate", "-", "-redelivery-rate", "-Inf"}, "msgaudit tune: -redelivery-rate -Inf: want a probability in [0,1]"},
		{[]string{"tune", "-generate", "-", "-producers", "-1"}, "msgaudit tune: -producers -1: want at least 1"},
		{[]string{"tune", "-generate", "-", "-count", "-1"}, "msgaudit tune: -count -1: want 0 or more"},
		{[]string{"tune", "-generate", "-", "-destinations", "-1"}, "msgaudit tune: -destinations -1: want 0 or more"},
		{[]string{"tune", "-generate", "-", "-distance", "fixed:-1"}, "msgaudit tune: -distance: invalid distance distribution: \"fixed:-1\": N is not an integer in 0..2^40 (want fixed:N, uniform:A-B or exp:MEAN)"},
		{[]string{"demo", "-fail-rate", "NaN"}, "msgaudit demo: -fail-rate must be in [0, 1), got NaN"},
		{[]string{"demo", "-panic-rate", "NaN"}, "msgaudit demo: -panic-rate must be in [0, 1), got NaN"},
		{[]string{"demo", "-fail-rate", "Inf"}, "msgaudit demo: -fail-rate must be in [0, 1), got +Inf"},
		{[]string{"demo", "-panic-rate", "-Inf"}, "msgaudit demo: -panic-rate must be in [0, 1), got -Inf"},
		{[]string{"demo", "-panic-rate", "1"}, "msgaudit demo: -panic-rate must be in [0, 1), got 1"},
		{[]string{"demo", "-n", "9223372036854775807"}, "msgaudit demo: -n must be at most 1000000, got 9223372036854775807"},
		{[]string{"demo", "-n", "0"}, "msgaudit demo: -n must be positive, got 0"},
		{[]string{"demo", "-producers", "0"}, "msgaudit demo: -producers must be positive, got 0"},
		{[]string{"demo", "-producers", "1025"}, "msgaudit demo: -producers must be at most 1024, got 1025"},
		{[]string{"demo", "-workers", "100000"}, "msgaudit demo: -workers must be at most 1024, got 100000"},
		{[]string{"demo", "-prefetch", "0"}, "msgaudit demo: -prefetch must be positive, got 0"},
		{[]string{"demo", "-prefetch", "65537"}, "msgaudit demo: -prefetch must be at most 65536, got 65537"},
		{[]string{"demo", "-max-attempts", "0"}, "msgaudit demo: -max-attempts must be positive, got 0"},
		{[]string{"demo", "-max-attempts", "1001"}, "msgaudit demo: -max-attempts must be at most 1000, got 1001"},
		{[]string{"demo", "-kills", "1000000000"}, "msgaudit demo: -kills must be at most 1000, got 1000000000"},
		{[]string{"demo", "-cuts", "1001"}, "msgaudit demo: -cuts must be at most 1000, got 1001"},
		{[]string{"demo", "-replays", "-1"}, "msgaudit demo: -replays must be >= 0, got -1"},
		{[]string{"demo", "-replays", "1001"}, "msgaudit demo: -replays must be at most 1000, got 1001"},
		{[]string{"demo", "-replay-size", "1000001"}, "msgaudit demo: -replay-size must be at most 1000000, got 1000001"},
		{[]string{"demo", "-restarts", "1001"}, "msgaudit demo: -restarts must be at most 1000, got 1001"},
		{[]string{"demo", "-timeout", "-1s"}, "msgaudit demo: -timeout must be positive, got -1s"},
		{[]string{"demo", "-timeout", "NaN"}, "msgaudit demo: invalid value \"NaN\" for flag -timeout"},
		{[]string{"bench", "-count", "0"}, "msgaudit bench: -count must be in 1..100, got 0"},
		{[]string{"bench", "-count", "1000000"}, "msgaudit bench: -count must be in 1..100, got 1000000"},
		{[]string{"bench", "-benchtime", "-1s"}, "msgaudit bench: -benchtime must be positive, got -1s"},
		{[]string{"bench", "-benchtime", "1000h"}, "msgaudit bench: -benchtime must be at most 1m0s, got 1000h0m0s"},
		{[]string{"bench", "-benchtime", "NaN"}, "msgaudit bench: invalid value \"NaN\" for flag -benchtime"},
	} {
		code, stdout, stderr := runCmd(t, run, tt.args...)
		first, _, _ := strings.Cut(stderr, "\n")
		if code != exitUsage || stdout != "" || !strings.HasPrefix(first, tt.want) {
			t.Errorf("%q: exit %d, stdout %q, stderr\n%s\nwant exit 2, nothing on stdout, and a first line starting %q", tt.args, code, stdout, stderr, tt.want)
		}
	}
}

// TestDemoHugeN: the demo with -n 2^63-1 (it built every key up front,
// ignored -timeout, and grew until the kernel killed it) fails at once,
// allocating next to nothing.
func TestDemoHugeN(t *testing.T) {
	// Not parallel: a heap measurement.
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	code, out, errOut := runDemoTest(t, "-n", "9223372036854775807", "-timeout", "3s")
	runtime.ReadMemStats(&after)
	if code != exitUsage || out != "" || !strings.HasPrefix(errOut, "msgaudit demo: -n must be at most 1000000, got 9223372036854775807\n") {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
	if grew := after.TotalAlloc - before.TotalAlloc; grew > 16<<20 {
		t.Fatalf("allocated %d bytes to refuse -n", grew)
	}
}
