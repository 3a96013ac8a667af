// Package pgrestart gives tests the private server instances that
// scripts/services runs for restart tests, which serve no other user:
// PostgreSQL ("pg-restart", port 5433; Open), MariaDB ("mariadb-restart",
// port 3307; OpenMariaDB) and a nats-server with JetStream
// ("nats-restart", port 4240; OpenNATS). Each comes with its URL and the
// command that restarts it ("ctl restart fast|immediate": pg_ctl restart
// -m MODE; for MariaDB and NATS a clean shutdown or SIGKILL, then a start
// on the same data). The shared test servers are never restarted.
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

	"github.com/acemq/msgaudit/internal/testkit/testenv"
)

// Instance is the private server, locked for one test.
type Instance struct {
	// URL is a postgres:// (or mysql://) URL of database test on the
	// instance, or the nats:// URL of the NATS server.
	URL string
	ctl string
}

// Open returns the instance, skipping the test when MSGAUDIT_PG_RESTART_URL
// or MSGAUDIT_PG_RESTART_CTL is unset (failing it when services are
// required), and locks it until the test's cleanup.
func Open(t testing.TB) *Instance {
	t.Helper()
	return open(t, "MSGAUDIT_PG_RESTART_URL", "MSGAUDIT_PG_RESTART_CTL", "PostgreSQL")
}

// OpenMariaDB is Open for the private MariaDB instance
// (MSGAUDIT_MYSQL_RESTART_URL, a mysql:// URL, and
// MSGAUDIT_MYSQL_RESTART_CTL).
func OpenMariaDB(t testing.TB) *Instance {
	t.Helper()
	return open(t, "MSGAUDIT_MYSQL_RESTART_URL", "MSGAUDIT_MYSQL_RESTART_CTL", "MariaDB")
}

// OpenNATS is Open for the private nats-server with JetStream and file
// storage (MSGAUDIT_NATS_RESTART_URL, a nats:// URL, and
// MSGAUDIT_NATS_RESTART_CTL).
func OpenNATS(t testing.TB) *Instance {
	t.Helper()
	return open(t, "MSGAUDIT_NATS_RESTART_URL", "MSGAUDIT_NATS_RESTART_CTL", "NATS server")
}

func open(t testing.TB, urlVar, ctlVar, what string) *Instance {
	t.Helper()
	u := testenv.Getenv(t, urlVar, "the restart tests need a "+what+" of their own")
	ctl := testenv.Getenv(t, ctlVar, "the restart tests need the command that restarts their "+what)
	if _, err := os.Stat(ctl); err != nil {
		t.Fatalf("%s: %v", ctlVar, err)
	}
	unlock, err := lock(ctl + ".lock")
	if err != nil {
		t.Fatalf("locking the restart instance: %v", err)
	}
	t.Cleanup(unlock)
	return &Instance{URL: u, ctl: ctl}
}

// Restart restarts the server with pg_ctl restart -m mode ("fast" or
// "immediate"; for MariaDB and NATS a clean stop or SIGKILL) and returns once it accepts connections again, with how
// long that took. It is safe to call from any goroutine.
func (in *Instance) Restart(ctx context.Context, mode string) (time.Duration, error) {
	t0 := time.Now()
	out, err := exec.CommandContext(ctx, in.ctl, "restart", mode).CombinedOutput()
	if err != nil {
		return time.Since(t0), fmt.Errorf("%s restart %s: %v: %s", in.ctl, mode, err, strings.TrimSpace(string(out)))
	}
	return time.Since(t0), nil
}
