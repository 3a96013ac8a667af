package main

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/acemq/msgaudit/cmd/msgaudit/internal/benchkit"
)

// TestMainUsage: the top-level command line's exit statuses and messages.
func TestMainUsage(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name   string
		args   []string
		code   int
		stderr string // exact, or a prefix when it ends in "…"
	}{
		{"no command", nil, 2, "usage: msgaudit <command> [flags]\n…"},
		{"help", []string{"-h"}, 0, "usage: msgaudit <command> [flags]\n…"},
		{"unknown command", []string{"nosuch"}, 2, "msgaudit: unknown command \"nosuch\"\nrun 'msgaudit -h' for usage\n"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			code, stdout, stderr := runCmd(t, run, tt.args...)
			if code != tt.code {
				t.Errorf("exit %d, want %d", code, tt.code)
			}
			if want, prefix := strings.CutSuffix(tt.stderr, "…"); prefix && !strings.HasPrefix(stderr, want) || !prefix && stderr != want {
				t.Errorf("stderr %q, want %q", stderr, tt.stderr)
			}
			if stdout != "" {
				t.Errorf("stdout %q, want nothing", stdout)
			}
		})
	}
}

// TestParseFlags: a bad flag is one line naming it plus the pointer to -h
// (exit 2), never the whole usage; -h prints the usage (exit 0).
func TestParseFlags(t *testing.T) {
	t.Parallel()
	newFS := func(stderr *bytes.Buffer) *flag.FlagSet {
		fs := flag.NewFlagSet("demo", flag.ContinueOnError)
		fs.Usage = func() { stderr.WriteString("USAGE\n"); fs.PrintDefaults() }
		fs.Int("n", 1, "count")
		return fs
	}
	var out bytes.Buffer
	plain := flag.NewFlagSet("bench", flag.ContinueOnError) // the flag package's default Usage
	plain.Bool("quick", false, "fast")
	if code, stop := parseFlags(plain, []string{"-h"}, &out); code != 0 || !stop || out.String() != "Usage of bench:\n  -quick\n    \tfast\n" {
		t.Errorf("-h with the default Usage: %d, %t, %q", code, stop, out.String())
	}
	for _, tt := range []struct {
		args   []string
		code   int
		stop   bool
		stderr string
	}{
		{[]string{"-n", "3"}, 0, false, ""},
		{[]string{"-bogus"}, 2, true, "msgaudit demo: flag provided but not defined: -bogus\nrun 'msgaudit demo -h' for usage\n"},
		{[]string{"-n", "x"}, 2, true, "msgaudit demo: invalid value \"x\" for flag -n: parse error\nrun 'msgaudit demo -h' for usage\n"},
		{[]string{"-h"}, 0, true, "USAGE\n  -n int\n    \tcount (default 1)\n"},
	} {
		var stderr bytes.Buffer
		code, stop := parseFlags(newFS(&stderr), tt.args, &stderr)
		if code != tt.code || stop != tt.stop || stderr.String() != tt.stderr {
			t.Errorf("parseFlags(%q) = %d, %t, stderr %q; want %d, %t, %q", tt.args, code, stop, stderr.String(), tt.code, tt.stop, tt.stderr)
		}
	}
}

// TestTuneMessages: every usage error names its flag in one line with the
// pointer to -h and exits 2; every failure exits 1; no message repeats a
// prefix.
func TestTuneMessages(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	k := benchkit.ProducerKey(1)
	trace := filepath.Join(dir, "trace.txt")
	if err := os.WriteFile(trace, []byte(k+":1\n"+k+":2\n"+k+":1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	empty := filepath.Join(dir, "empty.txt")
	if err := os.WriteFile(empty, []byte("# nothing\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	bad := filepath.Join(dir, "bad.txt")
	if err := os.WriteFile(bad, []byte(k+":1\nnot-an-id\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	const hint = "\nrun 'msgaudit tune -h' for usage\n"
	for _, tt := range []struct {
		args   []string
		code   int
		stderr string // exact
	}{
		{[]string{"-bogus"}, 2, "msgaudit tune: flag provided but not defined: -bogus" + hint},
		{[]string{"-target", "x", trace}, 2, "msgaudit tune: invalid value \"x\" for flag -target: parse error" + hint},
		{[]string{"-target", "2", trace}, 2, "msgaudit tune: -target 2: want a fraction in (0,1]" + hint},
		{[]string{"-target", "0", trace}, 2, "msgaudit tune: -target 0: want a fraction in (0,1]" + hint},
		{[]string{"-margin", "0.5", trace}, 2, "msgaudit tune: -margin 0.5: want a factor in [1, 1000]" + hint},
		{[]string{"-workers", "-1", trace}, 2, "msgaudit tune: -workers -1: want 0 (GOMAXPROCS) or more" + hint},
		{[]string{"-max-bad", "-1", trace}, 2, "msgaudit tune: -max-bad -1: want 0 or more" + hint},
		{[]string{"-depths", "a", trace}, 2, "msgaudit tune: -depths \"a\": \"a\" is not an integer" + hint},
		{[]string{"-depths", "0", trace}, 2, "msgaudit tune: -depths \"0\": 0 not in 1..16777216" + hint},
		{[]string{"-caps", "1,,2", trace}, 2, "msgaudit tune: -caps \"1,,2\": \"\" is not an integer" + hint},
		{[]string{"-quiet", "-progress", trace}, 2, "msgaudit tune: -quiet and -progress contradict each other" + hint},
		{[]string{trace, trace}, 2, "msgaudit tune: at most one trace file (got [\"" + trace + "\" \"" + trace + "\"])" + hint},
		{[]string{"-generate", "-", "-distance", "normal:3"}, 2, "msgaudit tune: -distance: invalid distance distribution: \"normal:3\": unknown kind \"normal\" (want fixed:N, uniform:A-B or exp:MEAN)" + hint},
		{[]string{"-generate", "-", "-redelivery-rate", "2"}, 2, "msgaudit tune: -redelivery-rate 2: want a probability in [0,1]" + hint},
		{[]string{"-generate", "-", "-producers", "0"}, 2, "msgaudit tune: -producers 0: want at least 1" + hint},
		{[]string{"-generate", "-", "-count", "-1"}, 2, "msgaudit tune: -count -1: want 0 or more" + hint},
		{[]string{"-generate", "-", "-destinations", "-1"}, 2, "msgaudit tune: -destinations -1: want 0 or more" + hint},
		{[]string{"-generate", "-", "extra"}, 2, "msgaudit tune: -generate takes no trace argument (got [\"extra\"])" + hint},
		{[]string{filepath.Join(dir, "missing.txt")}, 1, "msgaudit tune: open " + filepath.Join(dir, "missing.txt") + ": no such file or directory\n"},
		{[]string{empty}, 1, "msgaudit tune: " + empty + ": no message ids (1 lines, 0 bad)\n"},
		{[]string{"-strict", bad}, 1, "msgaudit tune: " + bad + ": bad trace line: line 2: msgid: malformed id: \"not-an-id\"\n"},
		{[]string{"-generate", filepath.Join(dir, "no", "such", "dir")}, 1, "msgaudit tune: open " + filepath.Join(dir, "no", "such", "dir") + ": no such file or directory\n"},
	} {
		code, _, stderr := runCmd(t, run, append([]string{"tune"}, tt.args...)...)
		if code != tt.code || stderr != tt.stderr {
			t.Errorf("tune %q: exit %d, stderr\n%q\nwant exit %d, stderr\n%q", tt.args, code, stderr, tt.code, tt.stderr)
		}
		if strings.Contains(stderr, "tune: tune:") {
			t.Errorf("tune %q: repeated prefix in %q", tt.args, stderr)
		}
	}
}

// TestTuneProgress: the progress bar is drawn only on a terminal or with
// -progress; a log (here a buffer) gets no carriage-return updates.
func TestTuneProgress(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	k := benchkit.ProducerKey(1)
	trace := filepath.Join(dir, "trace.txt")
	if err := os.WriteFile(trace, []byte(k+":1\n"+k+":2\n"+k+":1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		args []string
		bar  bool
	}{
		{[]string{trace}, false},
		{[]string{"-quiet", trace}, false},
		{[]string{"-progress", "-workers", "1", trace}, true},
	} {
		code, stdout, stderr := runCmd(t, runTune, tt.args...)
		if code != 0 || !strings.Contains(stdout, "recommended:") {
			t.Fatalf("tune %q: exit %d\n%s\n%s", tt.args, code, stdout, stderr)
		}
		if got := strings.Contains(stderr, "replaying"); got != tt.bar {
			t.Errorf("tune %q: progress bar drawn %t, want %t; stderr %q", tt.args, got, tt.bar, stderr)
		}
		if !tt.bar && strings.Contains(stderr, "\r") {
			t.Errorf("tune %q: carriage returns in a non-terminal stderr: %q", tt.args, stderr)
		}
	}
	if newProgress(new(bytes.Buffer), false, 10, "x") != nil {
		t.Error("newProgress drew on a buffer without force")
	}
	if newProgress(new(bytes.Buffer), true, 10, "x") == nil {
		t.Error("newProgress with force returned nil")
	}
	f, err := os.Create(filepath.Join(dir, "log"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if newProgress(f, false, 10, "x") != nil {
		t.Error("newProgress drew on a regular file without force")
	}
}

// TestBenchMessages: bench's usage errors name the flag, print one line
// and the pointer to -h, and exit 2; a failure exits 1.
func TestBenchMessages(t *testing.T) {
	t.Parallel()
	const hint = "\nrun 'msgaudit bench -h' for usage\n"
	missing := filepath.Join(t.TempDir(), "missing.json")
	for _, tt := range []struct {
		args   []string
		code   int
		stderr string // exact
	}{
		{[]string{"-bogus"}, 2, "msgaudit bench: flag provided but not defined: -bogus" + hint},
		{[]string{"-count", "-1"}, 2, "msgaudit bench: -count must be in 1..100, got -1" + hint},
		{[]string{"-benchtime", "-1s"}, 2, "msgaudit bench: -benchtime must be positive, got -1s" + hint},
		{[]string{"-run", "("}, 2, "msgaudit bench: -run: error parsing regexp: missing closing ): `(`" + hint},
		{[]string{"-quiet", "-progress"}, 2, "msgaudit bench: -quiet and -progress contradict each other" + hint},
		{[]string{"extra"}, 2, "msgaudit bench: unexpected arguments: [\"extra\"]" + hint},
		{[]string{"-from", missing}, 1, "msgaudit bench: open " + missing + ": no such file or directory\n"},
	} {
		var stdout, stderr bytes.Buffer
		code := run(t.Context(), append([]string{"bench"}, tt.args...), &stdout, &stderr)
		if code != tt.code || stderr.String() != tt.stderr {
			t.Errorf("bench %q: exit %d, stderr %q; want %d, %q", tt.args, code, stderr.String(), tt.code, tt.stderr)
		}
	}
}
