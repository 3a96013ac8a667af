package main

import (
	"bytes"
	"context"
	"database/sql"
	"io"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/acemq/msgaudit/internal/testkit/testenv"
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

// runDemoTest runs the demo command with args, bounded by a timeout of 90s
// unless args set one.
func runDemoTest(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	code := runDemo(context.Background(), append([]string{"-timeout", "90s"}, args...), &stdout, &stderr)
	return code, stdout.String(), stderr.String()
}

// TestDemoLedger: a key applied twice is one row and one extra
// application, also inside a caller's transaction (the inbox's).
func TestDemoLedger(t *testing.T) {
	ctx := context.Background()
	led, err := openDemoLedger(filepath.Join(t.TempDir(), "ledger.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer led.close()
	for _, tc := range []struct {
		keys        []string
		inTx        bool
		rows, twice int64
	}{
		{keys: []string{"a"}, rows: 1, twice: 0},
		{keys: []string{"a"}, rows: 1, twice: 1},
		{keys: []string{"b", "b"}, inTx: true, rows: 2, twice: 2},
		{keys: []string{"c"}, inTx: true, rows: 3, twice: 2},
	} {
		var tx *sql.Tx
		if tc.inTx {
			if tx, err = led.db.BeginTx(ctx, nil); err != nil {
				t.Fatal(err)
			}
		}
		for _, k := range tc.keys {
			if err := led.apply(ctx, tx, k, "id-"+k); err != nil {
				t.Fatalf("apply %s: %v", k, err)
			}
		}
		if tx != nil {
			if err := tx.Commit(); err != nil {
				t.Fatal(err)
			}
		}
		rows, err := led.count(ctx)
		if err != nil {
			t.Fatal(err)
		}
		twice, err := led.twice(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if rows != tc.rows || twice != tc.twice {
			t.Errorf("after %v (tx %v): %d rows, %d twice; want %d, %d", tc.keys, tc.inTx, rows, twice, tc.rows, tc.twice)
		}
	}
}

// checkFaults fails the test for every fault row that is 0.
func checkFaults(t *testing.T, out string, rows ...string) {
	t.Helper()
	for _, row := range rows {
		if demoRow(t, out, row) == 0 {
			t.Errorf("%s = 0: the fault was not injected\n%s", row, out)
		}
	}
}

// TestDemoCrash runs the demo small on the broker model with the inbox and
// every fault, three SIGKILLs of the consumer included: nothing lost,
// nothing applied twice, exit 0.
func TestDemoCrash(t *testing.T) {
	code, out, errOut := runDemoTest(t, "-n", "2000", "-kills", "3", "-seed", "7")
	if code != 0 {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
	if !strings.Contains(out, "broker MODEL") || !strings.Contains(out, "guard: inbox") || !strings.Contains(out, "OK: ") {
		t.Errorf("table does not say model / inbox / OK:\n%s", out)
	}
	if demoRow(t, out, "sent") != 2000 || demoRow(t, out, "lost") != 0 || demoRow(t, out, "applied twice") != 0 ||
		demoRow(t, out, "left on the broker") != 0 || demoRow(t, out, "consumer kills") != 3 {
		t.Errorf("bad totals:\n%s", out)
	}
	if demoRow(t, out, "applied")+demoRow(t, out, "dead-lettered") < 2000 {
		t.Errorf("applied + dead-lettered < sent:\n%s", out)
	}
	checkFaults(t, out, "redeliveries", "duplicates absorbed", "retries", "connection cuts", "failover replays", "consumer restarts")
	if demoRow(t, out, "throughput") == 0 {
		t.Errorf("no throughput:\n%s", out)
	}
}

// TestDemoGuardNone: with the pipeline disabled, the kills and replays
// apply messages twice, and the demo says so and exits 1.
func TestDemoGuardNone(t *testing.T) {
	code, out, errOut := runDemoTest(t, "-guard", "none", "-n", "500", "-kills", "2", "-replays", "2")
	if code != 1 || demoRow(t, out, "applied twice") == 0 || !strings.Contains(out, "FAIL: messages applied twice") {
		t.Fatalf("exit %d, want 1 with applied twice > 0\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
	if demoRow(t, out, "lost") != 0 {
		t.Errorf("lost without a pipeline:\n%s", out)
	}
}

// TestDemoGuardStore: the external store's run reports what it applied
// twice, loses nothing, and exits 0 either way.
func TestDemoGuardStore(t *testing.T) {
	code, out, errOut := runDemoTest(t, "-guard", "store", "-n", "500", "-kills", "2")
	if code != 0 || demoRow(t, out, "lost") != 0 || !strings.Contains(out, "guard: store") {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
	if twice := demoRow(t, out, "applied twice"); (twice > 0) != strings.Contains(out, "NOTE: ") {
		t.Errorf("applied twice %d, and the NOTE is (not) printed:\n%s", twice, out)
	}
	checkFaults(t, out, "duplicates absorbed", "consumer kills")
}

// TestDemoLost: a consumer that acknowledges a message without applying
// it (a test hook) makes the demo report it lost and exit 1.
func TestDemoLost(t *testing.T) {
	cfg, err := parseDemoFlags([]string{"-n", "300", "-kills", "1", "-timeout", "90s"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	cfg.loseKey = "p1-5"
	var stderr bytes.Buffer
	rep, err := demo(context.Background(), cfg, &stderr)
	if err != nil {
		t.Fatalf("%v\n%s", err, stderr.String())
	}
	var out bytes.Buffer
	rep.print(&out)
	if rep.lost != 1 || rep.exitCode() != 1 || demoRow(t, out.String(), "lost") != 1 || !strings.Contains(out.String(), "FAIL: messages lost") {
		t.Fatalf("lost %d, exit %d, want 1 and 1:\n%s", rep.lost, rep.exitCode(), out.String())
	}
}

// TestDemoDeadLetters: a handler failing most attempts exhausts
// -max-attempts; the dead-lettered messages are accounted for, not lost.
func TestDemoDeadLetters(t *testing.T) {
	code, out, errOut := runDemoTest(t, "-n", "300", "-fail-rate", "0.6", "-max-attempts", "2", "-replays", "0", "-kills", "1")
	if code != 0 {
		t.Fatalf("exit %d\n%s\n%s", code, out, errOut)
	}
	dl := demoRow(t, out, "dead-lettered")
	if dl == 0 || demoRow(t, out, "lost") != 0 || demoRow(t, out, "applied")+dl < 300 {
		t.Fatalf("dead letters not accounted for:\n%s", out)
	}
}

func TestDemoFlags(t *testing.T) {
	code, _, errOut := runDemoTest(t, "-h")
	if code != 0 || !strings.Contains(errOut, "in-process broker MODEL") || !strings.Contains(errOut, "NOT a broker") ||
		!strings.Contains(errOut, "-stomp") || !strings.Contains(errOut, "-guard") || !strings.Contains(errOut, "SIGKILL") ||
		!strings.Contains(errOut, "Without -stomp or -nats the demo runs on an in-process broker MODEL") ||
		!strings.Contains(errOut, "empty, and no -stomp, = the in-process broker MODEL") {
		t.Fatalf("-h: exit %d\n%s", code, errOut)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"-n", "-5"}, "-n must be positive, got -5"},
		{[]string{"-workers", "0"}, "-workers must be positive, got 0"},
		{[]string{"-kills", "-1"}, "-kills must be >= 0, got -1"},
		{[]string{"-cuts", "-2"}, "-cuts must be >= 0, got -2"},
		{[]string{"-fail-rate", "0.7", "-panic-rate", "0.4"}, "-fail-rate + -panic-rate must be below 1, got 0.7 + 0.4"},
		{[]string{"-fail-rate", "-0.1"}, "-fail-rate must be in [0, 1), got -0.1"},
		{[]string{"-guard", "bogus"}, `-guard must be inbox, store or none, got "bogus"`},
		{[]string{"-store", "memory"}, "-store is only used with -guard store (got -guard inbox)"},
		{[]string{"-queue", "x"}, `-queue must start with /queue/, got "x"`},
		{[]string{"-timeout", "0s"}, "-timeout must be positive, got 0s"},
		{[]string{"extra"}, `unexpected arguments ["extra"]`},
		{[]string{"-bogus"}, "flag provided but not defined: -bogus"},
		{[]string{"-n", "many"}, `invalid value "many" for flag -n`},
	} {
		code, out, errOut := runDemoTest(t, tc.args...)
		want := "msgaudit demo: " + tc.want
		lines := strings.Split(strings.TrimRight(errOut, "\n"), "\n")
		if code != 2 || out != "" || len(lines) != 2 || !strings.HasPrefix(lines[0], want) ||
			lines[1] != "run 'msgaudit demo -h' for usage" {
			t.Errorf("%v: exit %d, stderr:\n%s\nwant exit 2 and %q, then the usage hint", tc.args, code, errOut, want)
		}
	}
	code, _, errOut = runDemoTest(t, "-n", "10", "-guard", "store", "-store", "nosuch://x")
	if code != 1 || !strings.HasPrefix(errOut, "msgaudit demo: -store ") || strings.Count(errOut, "idempotency") > 0 {
		t.Errorf("bad store: exit %d, want 1 and one prefix:\n%s", code, errOut)
	}
}

func TestDemoExitCode(t *testing.T) {
	for _, tc := range []struct {
		rep  demoReport
		want int
		says string
	}{
		{demoReport{guard: guardInbox}, 0, "OK: every message"},
		{demoReport{guard: guardInbox, dlqDepth: 2}, 0, "OK: nothing lost"},
		{demoReport{guard: guardInbox, lost: 1}, 1, "FAIL: messages lost"},
		{demoReport{guard: guardInbox, twice: 1}, 1, "FAIL: messages applied twice"},
		{demoReport{guard: guardNone, twice: 1}, 1, "FAIL: messages applied twice"},
		{demoReport{guard: guardStore, twice: 1}, 0, "NOTE: 1 applied twice"},
		{demoReport{guard: guardStore, twice: 1, lost: 1}, 1, "FAIL: messages lost"},
		{demoReport{guard: guardInbox, timedOut: true}, 1, "FAIL: timed out"},
	} {
		if got := tc.rep.exitCode(); got != tc.want {
			t.Errorf("%+v: %d, want %d", tc.rep, got, tc.want)
		}
		var b bytes.Buffer
		tc.rep.print(&b)
		if !strings.Contains(b.String(), tc.says) {
			t.Errorf("%+v printed\n%s\nwant %q", tc.rep, b.String(), tc.says)
		}
	}
}

// TestDemoStomp runs the crash demo against real ActiveMQ
// (MSGAUDIT_STOMP_ADDR), with the inbox.
func TestDemoStomp(t *testing.T) {
	addr := testenv.Getenv(t, "MSGAUDIT_STOMP_ADDR", "real ActiveMQ")
	code, out, errOut := runDemoTest(t, "-stomp", addr, "-n", "2000", "-kills", "3", "-cuts", "2")
	if code != 0 {
		t.Fatalf("exit %d\n%s\n%s", code, out, errOut)
	}
	if demoRow(t, out, "lost") != 0 || demoRow(t, out, "applied twice") != 0 || demoRow(t, out, "left on the broker") != 0 ||
		demoRow(t, out, "consumer kills") != 3 || !strings.Contains(out, "ActiveMQ") {
		t.Fatalf("table:\n%s", out)
	}
}

// TestDemoNATS runs the crash demo against real NATS JetStream
// (MSGAUDIT_NATS_URL), with the inbox: nothing lost, nothing applied
// twice, the stream empty at the end.
func TestDemoNATS(t *testing.T) {
	url := testenv.Getenv(t, "MSGAUDIT_NATS_URL", "NATS with JetStream")
	code, out, errOut := runDemoTest(t, "-nats", url, "-n", "2000", "-kills", "3", "-cuts", "2")
	if code != 0 {
		t.Fatalf("exit %d\n%s\n%s", code, out, errOut)
	}
	if demoRow(t, out, "lost") != 0 || demoRow(t, out, "applied twice") != 0 || demoRow(t, out, "left on the broker") != 0 ||
		demoRow(t, out, "consumer kills") != 3 || demoRow(t, out, "applied") != 2000 || !strings.Contains(out, "NATS JetStream") {
		t.Fatalf("table:\n%s", out)
	}
}

// TestDemoNATSHelpers pins how -nats and -queue map to the proxy's
// upstream and the stream's name, and that credentials are not printed.
func TestDemoNATSHelpers(t *testing.T) {
	for in, want := range map[string]string{
		"nats://127.0.0.1:4222": "127.0.0.1:4222", "nats://u:p@h:4333,nats://h2:4222": "h:4333", "nats://h": "h:4222",
	} {
		if got, err := demoNATSHost(in); err != nil || got != want {
			t.Errorf("demoNATSHost(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	if _, err := demoNATSHost("h:4222"); err == nil {
		t.Error("demoNATSHost accepted an address without a scheme")
	}
	if got := demoStreamName("/queue/msgaudit.demo.12"); got != "msgaudit_demo_12" {
		t.Errorf("demoStreamName = %q", got)
	}
	if got := demoRedactNATS("nats://u:s3cret@h:4222,nats://tok@h2:4222"); strings.Contains(got, "s3cret") || strings.Contains(got, "tok@") {
		t.Errorf("demoRedactNATS shows a secret: %s", got)
	}
}
