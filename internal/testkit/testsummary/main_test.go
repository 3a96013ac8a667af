package main

import (
	"strings"
	"testing"
)

func events(lines ...string) string { return strings.Join(lines, "\n") + "\n" }

func TestRun(t *testing.T) {
	const (
		runA  = `{"Action":"run","Package":"p","Test":"TestA"}`
		outA  = `{"Action":"output","Package":"p","Test":"TestA","Output":"    a_test.go:9: boom\n"}`
		failA = `{"Action":"fail","Package":"p","Test":"TestA"}`
		passB = `{"Action":"pass","Package":"p","Test":"TestB"}`
		outC  = `{"Action":"output","Package":"p","Test":"TestC","Output":"    c_test.go:3: MSGAUDIT_REDIS_URL is not set\n"}`
		skipC = `{"Action":"skip","Package":"p","Test":"TestC"}`
		pkgOK = `{"Action":"pass","Package":"p","Elapsed":1.5}`
		pkgNo = `{"Action":"fail","Package":"p","Elapsed":1.5}`
		pOut  = `{"Action":"output","Package":"p","Output":"panic: test timed out\n"}`
		runD  = `{"Action":"run","Package":"p","Test":"TestD"}`
		outD  = `{"Action":"output","Package":"p","Test":"TestD","Output":"goroutine 7 [chan send]:\n"}`
		bOut  = `{"Action":"build-output","ImportPath":"q [q.test]","Output":"q.go:1: syntax error\n"}`
		bFail = `{"Action":"build-fail","ImportPath":"q [q.test]"}`
	)
	for _, tc := range []struct {
		name    string
		in      string
		noSkips bool
		rc      int
		want    []string
	}{
		{"all pass", events(passB, pkgOK), true, 0, []string{"ok   p 1.5s", "tests: 1 passed, 0 failed, 0 skipped"}},
		{"a failure shows its output", events(runA, outA, failA, passB, pkgNo), false, 1,
			[]string{"--- FAIL: TestA (p)", "a_test.go:9: boom", "tests: 1 passed, 1 failed, 0 skipped"}},
		{"a skip is listed with its reason", events(passB, outC, skipC, pkgOK), false, 0,
			[]string{"skipped: p TestC: c_test.go:3: MSGAUDIT_REDIS_URL is not set", "tests: 1 passed, 0 failed, 1 skipped"}},
		{"a skip fails with -no-skips", events(passB, outC, skipC, pkgOK), true, 1, []string{"every test must run here"}},
		{"a package crash shows its output", events(passB, pOut, pkgNo), false, 1,
			[]string{"FAIL p 1.5s", "panic: test timed out", "failed packages: p"}},
		{"a test that never ended shows its output", events(passB, runD, outD, pOut, pkgNo), false, 1,
			[]string{"--- unfinished: TestD (p)", "goroutine 7 [chan send]:", "failed packages: p"}},
		{"a build failure", events(bOut, bFail, passB, pkgOK), false, 0, []string{"build failed: q [q.test]", "syntax error"}},
		{"nothing ran", events(pkgOK), false, 1, []string{"no test ran"}},
		{"non-JSON lines are passed through", "go: unknown flag -x\n" + events(passB, pkgOK), false, 0, []string{"go: unknown flag -x"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out strings.Builder
			if rc := run(strings.NewReader(tc.in), &out, tc.noSkips); rc != tc.rc {
				t.Errorf("exit status %d, want %d\n%s", rc, tc.rc, out.String())
			}
			for _, w := range tc.want {
				if !strings.Contains(out.String(), w) {
					t.Errorf("output lacks %q:\n%s", w, out.String())
				}
			}
		})
	}
}

// FuzzRun: any input is summarised without a panic, and the closing line
// is always printed.
func FuzzRun(f *testing.F) {
	f.Add(`{"Action":"pass","Package":"p","Test":"T"}` + "\n")
	f.Add(`{"Action":"output","Package":"p","Test":"T","Output":"x"}` + "\n{")
	f.Fuzz(func(t *testing.T, in string) {
		var out strings.Builder
		run(strings.NewReader(in), &out, true)
		if !strings.Contains(out.String(), "tests: ") {
			t.Fatalf("no closing line:\n%s", out.String())
		}
	})
}
