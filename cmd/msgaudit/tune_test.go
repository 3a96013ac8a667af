package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/acemq/msgaudit/cmd/msgaudit/internal/benchkit"
)

func runCmd(t *testing.T, f func(context.Context, []string, io.Writer, io.Writer) int, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	code := f(context.Background(), args, &out, &errb)
	return code, out.String(), errb.String()
}

func TestTuneGenerateThenReplay(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	trace := filepath.Join(dir, "trace.txt")
	code, _, stderr := runCmd(t, runTune, "--generate", trace, "--producers", "4", "--count", "8000",
		"--redelivery-rate", "0.1", "--distance", "fixed:300", "--seed", "7")
	if code != 0 || !strings.Contains(stderr, "wrote") {
		t.Fatalf("generate: %d %s", code, stderr)
	}
	js := filepath.Join(dir, "tune.json")
	code, stdout, stderr := runCmd(t, runTune, "--quiet", "--json", js, trace)
	if code != 0 {
		t.Fatalf("tune: %d %s", code, stderr)
	}
	for _, want := range []string{
		"exact need for 100.0% of the duplicates: depth >= 300, max producers >= 4",
		"recommended: depth 375, max producers 5: catches",
		"audit.Options{Depth: 375, MaxProducers: 5}",
		"0 bad lines",
	} {
		if !strings.Contains(stdout, want) {
			t.Errorf("output lacks %q:\n%s", want, stdout)
		}
	}
	var j tuneResultJSON
	b, err := os.ReadFile(js)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &j); err != nil {
		t.Fatal(err)
	}
	if j.NeedDepth != 300 || j.NeedCap != 4 || j.Minimal == nil || j.Recommended.Caught != j.Duplicates || len(j.Cells) == 0 {
		t.Fatalf("json: %+v", j)
	}
	code, stdout, _ = runCmd(t, runTune, "--quiet", "--grid", "--depths", "256,300", "--caps", "3,4", trace)
	if code != 0 || !strings.Contains(stdout, "missed evicted") || strings.Count(stdout, "\n") < 8 {
		t.Fatalf("grid: %d\n%s", code, stdout)
	}
}

func TestTuneBadLines(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	trace := filepath.Join(dir, "trace.txt")
	k := benchkit.ProducerKey(1)
	in := k + ":1\nnot-an-id\n" + k + ":2\n" + k + ":1\n" + k + ":007\n"
	if err := os.WriteFile(trace, []byte(in), 0o644); err != nil {
		t.Fatal(err)
	}
	code, stdout, stderr := runCmd(t, runTune, "--quiet", trace)
	if code != 0 || !strings.Contains(stderr, trace+":2:") || !strings.Contains(stderr, trace+":5:") || !strings.Contains(stdout, "2 bad lines") {
		t.Fatalf("%d\n%s\n%s", code, stdout, stderr)
	}
	code, _, stderr = runCmd(t, runTune, "--quiet", "--strict", trace)
	if code != 1 || !strings.Contains(stderr, "line 2") {
		t.Fatalf("strict: %d %s", code, stderr)
	}
}

func TestTuneUsageErrors(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	empty := filepath.Join(dir, "empty.txt")
	os.WriteFile(empty, []byte("# nothing\n"), 0o644)
	tests := []struct {
		args []string
		code int
	}{
		{[]string{"--nope"}, 2},
		{[]string{"a", "b"}, 2},
		{[]string{"--depths", "x", empty}, 2},
		{[]string{"--caps", "1,,2", empty}, 2},
		{[]string{"--generate", "-", "--distance", "normal:3"}, 2},
		{[]string{"--generate", "-", "extra"}, 2},
		{[]string{"--generate", "-", "--redelivery-rate", "2"}, 2},
		{[]string{filepath.Join(dir, "missing.txt")}, 1},
		{[]string{"--quiet", empty}, 1},
		{[]string{"-h"}, 0},
	}
	for _, tt := range tests {
		if code, _, stderr := runCmd(t, runTune, tt.args...); code != tt.code {
			t.Errorf("%q: exit %d, want %d: %s", tt.args, code, tt.code, stderr)
		}
	}
	k := benchkit.ProducerKey(1)
	one := filepath.Join(dir, "one.txt")
	os.WriteFile(one, []byte(k+":1\n"+k+":1\n"), 0o644)
	if code, _, stderr := runCmd(t, runTune, "--quiet", "--target", "2", one); code != 2 {
		t.Errorf("--target 2: exit %d: %s", code, stderr)
	}
}

func TestTuneGenerateStdout(t *testing.T) {
	t.Parallel()
	code, stdout, _ := runCmd(t, runTune, "--generate", "-", "--producers", "2", "--count", "3", "--destinations", "1")
	want := benchkit.ProducerKey(1) + ":1 /queue/q0\n" + benchkit.ProducerKey(2) + ":1 /queue/q0\n" + benchkit.ProducerKey(1) + ":2 /queue/q0\n"
	if code != 0 || stdout != want {
		t.Fatalf("%d %q", code, stdout)
	}
}

// TestTuneStdin reads the trace from standard input (not parallel: it
// swaps os.Stdin).
func TestTuneStdin(t *testing.T) {
	k := benchkit.ProducerKey(3)
	f, err := os.CreateTemp(t.TempDir(), "stdin")
	if err != nil {
		t.Fatal(err)
	}
	f.WriteString(k + ":5\n" + k + ":6\n" + k + ":5\n")
	f.Seek(0, 0)
	old := os.Stdin
	os.Stdin = f
	defer func() { os.Stdin = old }()
	code, stdout, stderr := runCmd(t, runTune, "--quiet", "-")
	if code != 0 || !strings.Contains(stdout, "trace stdin: 3 lines, 3 messages, 1 duplicates") ||
		!strings.Contains(stdout, "depth >= 1, max producers >= 1") {
		t.Fatalf("%d\n%s\n%s", code, stdout, stderr)
	}
}

// TestTuneInterruptedWhileReading: SIGINT (a cancelled context) stops tune
// while it waits on a standard input that neither sends nor closes (not
// parallel: it swaps os.Stdin).
func TestTuneInterruptedWhileReading(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	if _, err := w.WriteString(benchkit.ProducerKey(1) + ":1\n"); err != nil {
		t.Fatal(err)
	}
	old := os.Stdin
	os.Stdin = r
	defer func() { os.Stdin = old }()
	ctx, cancel := context.WithCancel(context.Background())
	type result struct {
		code   int
		stderr string
	}
	done := make(chan result, 1)
	go func() {
		var out, errb bytes.Buffer
		done <- result{runTune(ctx, []string{"--quiet", "-"}, &out, &errb), errb.String()}
	}()
	cancel()
	select {
	case res := <-done:
		if res.code != exitFailure || !strings.Contains(res.stderr, "context canceled") {
			t.Fatalf("exit %d, stderr %q; want 1 and context canceled", res.code, res.stderr)
		}
	case <-time.After(time.Minute):
		t.Fatal("tune still reading standard input a minute after SIGINT")
	}
}
