// Package pgrestart gives tests the private PostgreSQL instance that
// scripts/services runs for restart tests ("pg-restart": port 5433, no
// other user): its URL (MSGAUDIT_PG_RESTART_URL) and the command that
// restarts it (MSGAUDIT_PG_RESTART_CTL, "ctl restart fast|immediate",
// pg_ctl restart -m MODE). The shared test PostgreSQL is never restarted.
//
// go test runs the packages' tests in parallel, so Open holds an exclusive
// lock on the instance until the test ends: restart tests of different
// packages take turns instead of restarting the server under each other.
package pgrestart

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/acemq/msgaudit/internal/testenv"
)

// Instance is the private server, locked for one test.
type Instance struct {
	// URL is a postgres:// URL of database test on the instance.
	URL string
	ctl string
}

// Open returns the instance, skipping the test when MSGAUDIT_PG_RESTART_URL
// or MSGAUDIT_PG_RESTART_CTL is unset (failing it when services are
// required), and locks it until the test's cleanup.
func Open(t testing.TB) *Instance {
	t.Helper()
	u := testenv.Getenv(t, "MSGAUDIT_PG_RESTART_URL", "the restart tests need a PostgreSQL of their own")
	ctl := testenv.Getenv(t, "MSGAUDIT_PG_RESTART_CTL", "the restart tests need the command that restarts their PostgreSQL")
	if _, err := os.Stat(ctl); err != nil {
		t.Fatalf("MSGAUDIT_PG_RESTART_CTL: %v", err)
	}
	unlock, err := lock(ctl + ".lock")
	if err != nil {
		t.Fatalf("locking the restart instance: %v", err)
	}
	t.Cleanup(unlock)
	return &Instance{URL: u, ctl: ctl}
}

// Restart restarts the server with pg_ctl restart -m mode ("fast" or
// "immediate") and returns once it accepts connections again, with how
// long that took. It is safe to call from any goroutine.
func (in *Instance) Restart(ctx context.Context, mode string) (time.Duration, error) {
	t0 := time.Now()
	out, err := exec.CommandContext(ctx, in.ctl, "restart", mode).CombinedOutput()
	if err != nil {
		return time.Since(t0), fmt.Errorf("%s restart %s: %v: %s", in.ctl, mode, err, strings.TrimSpace(string(out)))
	}
	return time.Since(t0), nil
}
