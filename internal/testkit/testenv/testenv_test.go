package testenv_test

import (
	"testing"

	"github.com/acemq/msgaudit/internal/testkit/testenv"
)

// recorder records what Require asked of a test instead of ending it.
type recorder struct {
	testing.TB
	fatal, skip string
}

func (r *recorder) Helper()                        {}
func (r *recorder) Fatalf(format string, a ...any) { r.fatal = format }
func (r *recorder) Skipf(format string, a ...any)  { r.skip = format }

func TestRequire(t *testing.T) {
	for _, env := range []struct{ ci, require string }{{"true", ""}, {"", "1"}, {"", ""}} {
		ci := "true"
		if env.ci == "" && env.require == "" {
			ci = ""
		}
		t.Run("CI="+env.ci+",REQUIRE="+env.require, func(t *testing.T) {
			t.Setenv("CI", env.ci)
			t.Setenv("MSGAUDIT_REQUIRE_SERVICES", env.require)
			r := &recorder{TB: t}
			testenv.Require(r, true, "x", "y")
			if r.fatal != "" || r.skip != "" {
				t.Fatalf("ok=true must do nothing: %+v", r)
			}
			testenv.Require(r, false, "x", "y")
			if ci == "true" && (r.fatal == "" || r.skip != "") {
				t.Errorf("CI=true: want a failure, got %+v", r)
			}
			if ci == "" && (r.skip == "" || r.fatal != "") {
				t.Errorf("outside CI: want a skip, got %+v", r)
			}
		})
	}
}

func TestGetenv(t *testing.T) {
	t.Setenv("MSGAUDIT_TESTENV_PROBE", "v")
	if got := testenv.Getenv(t, "MSGAUDIT_TESTENV_PROBE", "probe"); got != "v" {
		t.Fatalf("Getenv = %q", got)
	}
	t.Setenv("CI", "true")
	t.Setenv("MSGAUDIT_REQUIRE_SERVICES", "")
	t.Setenv("MSGAUDIT_TESTENV_PROBE", "")
	r := &recorder{TB: t}
	testenv.Getenv(r, "MSGAUDIT_TESTENV_PROBE", "probe")
	if r.fatal == "" {
		t.Error("an unset variable under CI=true must fail the test")
	}
}
