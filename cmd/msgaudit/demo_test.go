package main

import (
	"bytes"
	"context"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/acemq/msgaudit/internal/testenv"
)

// demoRow returns the value of a row of the demo's table.
func demoRow(t *testing.T, out, name string) int64 {
	t.Helper()
	m := regexp.MustCompile(`(?m)^  ` + regexp.QuoteMeta(name) + `\s+(\d+)`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("row %q missing from:\n%s", name, out)
	}
	n, err := strconv.ParseInt(m[1], 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func runDemoTest(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	code := runDemo(context.Background(), args, &stdout, &stderr)
	return code, stdout.String(), stderr.String()
}

// TestDemoModel runs the demo small on the broker model, with every fault,
// and checks the exit status and the table.
func TestDemoModel(t *testing.T) {
	for _, store := range []string{"", "memory"} {
		t.Run("store="+store, func(t *testing.T) {
			args := []string{"-n", "2000", "-progress=false", "-seed", "7"}
			if store != "" {
				args = append(args, "-store", store)
			}
			code, out, errOut := runDemoTest(t, args...)
			if code != 0 {
				t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
			}
			if !strings.Contains(out, "broker MODEL") || !strings.Contains(out, "OK: ") {
				t.Errorf("table does not say model / OK:\n%s", out)
			}
			if demoRow(t, out, "sent") != 2000 || demoRow(t, out, "lost") != 0 || demoRow(t, out, "applied twice") != 0 ||
				demoRow(t, out, "left on the broker") != 0 {
				t.Errorf("bad totals:\n%s", out)
			}
			if demoRow(t, out, "applied")+demoRow(t, out, "dead-lettered") < 2000 {
				t.Errorf("applied + dead-lettered < sent:\n%s", out)
			}
			// The faults happened and were absorbed.
			for _, row := range []string{"redeliveries", "duplicates absorbed", "retries", "connection cuts", "failover replays", "consumer restarts"} {
				if demoRow(t, out, row) == 0 {
					t.Errorf("%s = 0: the fault was not injected\n%s", row, out)
				}
			}
			if demoRow(t, out, "throughput") == 0 {
				t.Errorf("no throughput:\n%s", out)
			}
		})
	}
}

// TestDemoDeadLetters: a handler failing most attempts exhausts
// -max-attempts; the dead-lettered messages are accounted for, not lost.
func TestDemoDeadLetters(t *testing.T) {
	code, out, errOut := runDemoTest(t, "-n", "500", "-progress=false", "-fail-rate", "0.6", "-max-attempts", "2",
		"-store", "memory", "-replays", "0")
	if code != 0 {
		t.Fatalf("exit %d\n%s\n%s", code, out, errOut)
	}
	dl := demoRow(t, out, "dead-lettered")
	if dl == 0 || demoRow(t, out, "lost") != 0 || demoRow(t, out, "applied")+dl < 500 {
		t.Fatalf("dead letters not accounted for:\n%s", out)
	}
}

func TestDemoFlags(t *testing.T) {
	code, _, errOut := runDemoTest(t, "-h")
	if code != 0 || !strings.Contains(errOut, "in-process broker MODEL") || !strings.Contains(errOut, "NOT a broker") ||
		!strings.Contains(errOut, "-stomp") {
		t.Fatalf("-h: exit %d\n%s", code, errOut)
	}
	for _, args := range [][]string{{"-n", "0"}, {"-fail-rate", "0.7", "-panic-rate", "0.4"}, {"-cuts", "-1"}, {"extra"}, {"-bogus"}} {
		if code, _, _ := runDemoTest(t, args...); code != 2 {
			t.Errorf("%v: exit %d, want 2", args, code)
		}
	}
	if code, _, errOut := runDemoTest(t, "-n", "10", "-progress=false", "-store", "nosuch://x"); code != 1 || !strings.Contains(errOut, "store") {
		t.Errorf("bad store: exit %d %s", code, errOut)
	}
}

func TestDemoExitCode(t *testing.T) {
	for _, tc := range []struct {
		rep  demoReport
		want int
	}{
		{demoReport{}, 0},
		{demoReport{lost: 1}, 1},
		{demoReport{twice: 1}, 1},
		{demoReport{timedOut: true}, 1},
	} {
		if got := tc.rep.exitCode(); got != tc.want {
			t.Errorf("%+v: %d, want %d", tc.rep, got, tc.want)
		}
		var b bytes.Buffer
		tc.rep.print(&b)
		if ok := strings.Contains(b.String(), "OK: "); ok != (tc.want == 0) {
			t.Errorf("%+v printed\n%s", tc.rep, b.String())
		}
	}
}

// TestDemoStomp runs the demo against real ActiveMQ (MSGAUDIT_STOMP_ADDR).
func TestDemoStomp(t *testing.T) {
	addr := testenv.Getenv(t, "MSGAUDIT_STOMP_ADDR", "real ActiveMQ")
	code, out, errOut := runDemoTest(t, "-stomp", addr, "-n", "1000", "-progress=false", "-cuts", "2", "-store", "memory")
	if code != 0 {
		t.Fatalf("exit %d\n%s\n%s", code, out, errOut)
	}
	if demoRow(t, out, "lost") != 0 || demoRow(t, out, "applied twice") != 0 || demoRow(t, out, "left on the broker") != 0 ||
		!strings.Contains(out, "ActiveMQ") {
		t.Fatalf("table:\n%s", out)
	}
}
