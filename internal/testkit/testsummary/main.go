// Command testsummary reads the events of `go test -json` on standard input
// and prints what a reader needs from a long run: one line per package, the
// output of every failed test and of every package that failed to build or
// crashed, every skipped test with its reason, and a closing line
//
//	tests: N passed, N failed, N skipped
//
// It exits 1 when a test or a package failed, when no test ran, or, with
// -no-skips, when any test was skipped. scripts/test runs it with -no-skips,
// so the project's test command never reports success over skipped tests.
package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
)

// event is one line of `go test -json` (cmd/test2json).
type event struct {
	Action     string
	Package    string
	ImportPath string
	Test       string
	Elapsed    float64
	Output     string
}

// summary accumulates a run's results.
type summary struct {
	passed, failed, skipped int
	failedPkgs              []string
	skips                   []string
	out                     map[string]*strings.Builder // output of running tests and packages
	build                   map[string]*strings.Builder // build output per import path
}

func newSummary() *summary {
	return &summary{out: map[string]*strings.Builder{}, build: map[string]*strings.Builder{}}
}

func (s *summary) buf(m map[string]*strings.Builder, k string) *strings.Builder {
	b := m[k]
	if b == nil {
		b = new(strings.Builder)
		m[k] = b
	}
	return b
}

// add takes one event and writes what must be shown at once to w.
func (s *summary) add(e event, w io.Writer) {
	key := e.Package + " " + e.Test
	switch e.Action {
	case "build-output":
		s.buf(s.build, e.ImportPath).WriteString(e.Output)
	case "build-fail":
		fmt.Fprintf(w, "build failed: %s\n%s", e.ImportPath, s.build[e.ImportPath])
		delete(s.build, e.ImportPath)
	case "output":
		s.buf(s.out, key).WriteString(e.Output)
	case "pass", "fail", "skip":
		body := s.out[key]
		delete(s.out, key)
		if e.Test == "" {
			s.endPackage(e, body, w)
			return
		}
		switch e.Action {
		case "pass":
			s.passed++
		case "fail":
			s.failed++
			fmt.Fprintf(w, "--- FAIL: %s (%s)\n%s", e.Test, e.Package, text(body))
		case "skip":
			s.skipped++
			s.skips = append(s.skips, fmt.Sprintf("%s %s: %s", e.Package, e.Test, skipReason(text(body))))
		}
	}
}

func (s *summary) endPackage(e event, body *strings.Builder, w io.Writer) {
	switch e.Action {
	case "pass":
		fmt.Fprintf(w, "ok   %s %.1fs\n", e.Package, e.Elapsed)
	case "fail":
		s.failedPkgs = append(s.failedPkgs, e.Package)
		// The package's own output: a panic, a timeout, a TestMain failure.
		fmt.Fprintf(w, "FAIL %s %.1fs\n%s", e.Package, e.Elapsed, text(body))
		// Tests still running when the binary died (a timeout's or a
		// SIGQUIT's goroutine dump is written as their output): they never
		// report, so their output is shown here or nowhere.
		var open []string
		for key := range s.out {
			if strings.HasPrefix(key, e.Package+" ") && key != e.Package+" " {
				open = append(open, key)
			}
		}
		sort.Strings(open)
		for _, key := range open {
			fmt.Fprintf(w, "--- unfinished: %s (%s)\n%s", strings.TrimPrefix(key, e.Package+" "), e.Package, text(s.out[key]))
			delete(s.out, key)
		}
	}
	// "skip" of a package: no test files; nothing to say.
}

func text(b *strings.Builder) string {
	if b == nil {
		return ""
	}
	return b.String()
}

// skipReason keeps the lines a test logged, without go test's framing.
func skipReason(out string) string {
	var keep []string
	for _, l := range strings.Split(out, "\n") {
		t := strings.TrimSpace(l)
		if t == "" || strings.HasPrefix(t, "=== ") || strings.HasPrefix(t, "--- SKIP") {
			continue
		}
		keep = append(keep, t)
	}
	if len(keep) == 0 {
		return "(no reason given)"
	}
	return strings.Join(keep, " / ")
}

// finish prints the skips and the closing line and returns the exit status.
func (s *summary) finish(w io.Writer, noSkips bool) int {
	sort.Strings(s.skips)
	for _, k := range s.skips {
		fmt.Fprintf(w, "skipped: %s\n", k)
	}
	if len(s.failedPkgs) > 0 {
		fmt.Fprintf(w, "failed packages: %s\n", strings.Join(s.failedPkgs, " "))
	}
	fmt.Fprintf(w, "tests: %d passed, %d failed, %d skipped\n", s.passed, s.failed, s.skipped)
	switch {
	case s.failed > 0 || len(s.failedPkgs) > 0:
		return 1
	case s.passed == 0:
		fmt.Fprintln(w, "testsummary: no test ran")
		return 1
	case noSkips && s.skipped > 0:
		fmt.Fprintln(w, "testsummary: tests were skipped; every test must run here")
		return 1
	}
	return 0
}

func run(r io.Reader, w io.Writer, noSkips bool) int {
	s := newSummary()
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64*1024), 16*1024*1024)
	for sc.Scan() {
		line := sc.Bytes()
		var e event
		if len(line) == 0 || line[0] != '{' || json.Unmarshal(line, &e) != nil {
			// Not an event: go test's own complaint (a flag error, a vet failure).
			fmt.Fprintf(w, "%s\n", line)
			continue
		}
		s.add(e, w)
	}
	if err := sc.Err(); err != nil {
		fmt.Fprintf(w, "testsummary: reading events: %v\n", err)
		return 1
	}
	return s.finish(w, noSkips)
}

func main() {
	noSkips := flag.Bool("no-skips", false, "exit 1 when any test was skipped")
	flag.Parse()
	os.Exit(run(os.Stdin, os.Stdout, *noSkips))
}
