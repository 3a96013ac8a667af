package main

import (
	"bytes"
	"context"
	"io"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// chainKills returns the kills of each process from the kills row.
func chainKills(t *testing.T, out string) map[string]int {
	t.Helper()
	got := map[string]int{}
	for _, role := range chainRoles {
		m := regexp.MustCompile(`(?m)^  kills .*` + regexp.QuoteMeta(chainRoleName(role)) + ` (\d+)`).FindStringSubmatch(out)
		if m == nil {
			t.Fatalf("no kills of %s in:\n%s", chainRoleName(role), out)
		}
		got[role], _ = strconv.Atoi(m[1])
	}
	return got
}

// TestDemoChain runs the chain small with its default 18 kills, six each
// of consumer A, the relay and consumer B, and every other fault: nothing
// lost, applied twice, ghostly or out of order; exit 0.
func TestDemoChain(t *testing.T) {
	code, out, errOut := runDemoTest(t, "-chain", "-n", "600", "-seed", "5")
	if code != 0 {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
	for row, want := range map[string]int64{"sent": 600, "lost": 0, "applied twice": 0, "ghosts": 0, "order violations": 0,
		"left on the broker": 0, "kills": defaultChainKills} {
		if got := demoRow(t, out, row); got != want {
			t.Errorf("%s = %d, want %d\n%s", row, got, want, out)
		}
	}
	for role, n := range chainKills(t, out) {
		if n != defaultChainKills/len(chainRoles) {
			t.Errorf("%s killed %d times, want %d\n%s", chainRoleName(role), n, defaultChainKills/len(chainRoles), out)
		}
	}
	dl := demoRow(t, out, "dead-lettered")
	if demoRow(t, out, "applied by A")+dl < 600 || demoRow(t, out, "applied by B")+dl < 600 || demoRow(t, out, "relayed") < demoRow(t, out, "applied by B") {
		t.Errorf("applied + dead-lettered < sent:\n%s", out)
	}
	checkFaults(t, out, "delivered", "duplicates absorbed", "retries", "connection cuts", "failover replays", "consumer restarts")
	if !strings.Contains(out, "broker MODEL") || !strings.Contains(out, "OK: ") {
		t.Errorf("table does not say model / OK:\n%s", out)
	}
}

// TestDemoChainPlanted plants one fault at a time — a message the relay
// publishes a second time under a new outbox id, one consumer A sends
// outside the delivery's transaction (which fails), one A acknowledges
// without applying or sending, consumer B applying a key's messages as its
// workers get to them — and checks that the chain's checker
// reports it, and only it, and exits 1.
func TestDemoChainPlanted(t *testing.T) {
	for _, tc := range []struct {
		name, row, says string
		plant           func(*demoConfig)
	}{
		{"relay sends twice", "applied twice", "FAIL: messages applied twice", func(c *demoConfig) { c.dupKey = "p1-5" }},
		{"send outside the transaction", "ghosts", "FAIL: ghosts", func(c *demoConfig) { c.ghostKey = "p2-6" }},
		{"acknowledged, not sent", "lost", "FAIL: messages lost", func(c *demoConfig) { c.loseKey = "p0-4" }},
		// Every failed attempt at B is retried after a backoff while the
		// other workers go on: some message is overtaken (not always the
		// same, so at least one violation, not exactly one).
		{"B out of order", "order violations", "FAIL: order violations", func(c *demoConfig) { c.unorderedB = true }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := parseDemoFlags([]string{"-chain", "-n", "200", "-kills", "3", "-replays", "1", "-timeout", "90s"}, io.Discard)
			if err != nil {
				t.Fatal(err)
			}
			tc.plant(&cfg)
			var stderr bytes.Buffer
			rep, err := demoChain(context.Background(), cfg, &stderr)
			if err != nil {
				t.Fatalf("%v\n%s", err, stderr.String())
			}
			var b bytes.Buffer
			rep.print(&b)
			out := b.String()
			if rep.exitCode() != 1 || !strings.Contains(out, tc.says) {
				t.Fatalf("exit %d, want 1 saying %q:\n%s", rep.exitCode(), tc.says, out)
			}
			t.Logf("%s = %d", tc.row, demoRow(t, out, tc.row))
			for _, row := range []string{"lost", "applied twice", "ghosts", "order violations"} {
				got := demoRow(t, out, row)
				switch {
				case row != tc.row && got != 0:
					t.Errorf("%s = %d, want 0\n%s", row, got, out)
				case row == tc.row && (got == 0 || got > 1 && row != "order violations"):
					t.Errorf("%s = %d, want 1\n%s", row, got, out)
				}
			}
		})
	}
}

// TestCheckChain pins the checker on hand-made ledgers.
func TestCheckChain(t *testing.T) {
	sent := []string{"p0-0", "p0-2", "p1-1", "p1-3"}
	byA := map[string]chainMsg{
		"p0-0": {"p0-0", "p0", 1}, "p0-2": {"p0-2", "p0", 2},
		"p1-1": {"p1-1", "p1", 1}, "p1-3": {"p1-3", "p1", 2},
	}
	in := func(keys ...string) []chainMsg {
		var out []chainMsg
		for _, k := range keys {
			out = append(out, byA[k])
		}
		return out
	}
	for _, tc := range []struct {
		name               string
		byA                map[string]chainMsg
		inB                []chainMsg
		dlq                map[string]bool
		lost, ghost, order int64
	}{
		{name: "all in order", byA: byA, inB: in("p1-1", "p0-0", "p1-3", "p0-2")},
		{name: "applied twice counts once", byA: byA, inB: in("p0-0", "p1-1", "p0-0", "p0-2", "p1-3", "p1-1")},
		{name: "missing", byA: byA, inB: in("p0-0", "p1-1", "p1-3"), lost: 1},
		{name: "dead-lettered is not lost", byA: byA, inB: in("p0-0", "p1-1", "p1-3"), dlq: map[string]bool{"p0-2": true}},
		{name: "out of order", byA: byA, inB: in("p0-2", "p0-0", "p1-1", "p1-3"), order: 1},
		{name: "a gap is not a violation", byA: byA, inB: in("p0-2", "p1-1", "p1-3"), dlq: map[string]bool{"p0-0": true}},
		{name: "not committed by A", byA: map[string]chainMsg{"p0-0": byA["p0-0"], "p1-1": byA["p1-1"], "p1-3": byA["p1-3"]},
			inB: in("p0-0", "p0-2", "p1-1", "p1-3"), ghost: 1},
		{name: "another number than A's", byA: byA, inB: []chainMsg{byA["p0-0"], {"p0-2", "p0", 7}, byA["p1-1"], byA["p1-3"]}, ghost: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			lost, ghost, order := checkChain(sent, tc.byA, tc.inB, tc.dlq)
			if lost != tc.lost || ghost != tc.ghost || order != tc.order {
				t.Errorf("lost %d, ghosts %d, order %d; want %d, %d, %d", lost, ghost, order, tc.lost, tc.ghost, tc.order)
			}
		})
	}
}

// TestDemoChainFlags: -h documents -chain; -chain refuses real brokers
// and guards other than the inbox; its kills default to 18 unless set.
func TestDemoChainFlags(t *testing.T) {
	code, _, errOut := runDemoTest(t, "-h")
	if code != 0 || !strings.Contains(errOut, "-chain runs a chain of three child processes") || !strings.Contains(errOut, "  -chain\n") {
		t.Fatalf("-h: exit %d\n%s", code, errOut)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"-chain", "-stomp", "127.0.0.1:61613"}, "-chain runs on the broker model; real brokers: not yet"},
		{[]string{"-chain", "-nats", "nats://127.0.0.1:4222"}, "-chain runs on the broker model; real brokers: not yet"},
		{[]string{"-chain", "-guard", "none"}, "-chain needs -guard inbox"},
	} {
		code, out, errOut := runDemoTest(t, tc.args...)
		if code != 2 || out != "" || !strings.HasPrefix(errOut, "msgaudit demo: "+tc.want) {
			t.Errorf("%v: exit %d, stderr:\n%s\nwant exit 2 and %q", tc.args, code, errOut, tc.want)
		}
	}
	for _, tc := range []struct {
		args  []string
		kills int
	}{
		{[]string{"-chain"}, defaultChainKills},
		{[]string{"-chain", "-kills", "2"}, 2},
		{[]string{"-chain", "-kills", "0"}, 0},
		{nil, 5},
	} {
		cfg, err := parseDemoFlags(tc.args, io.Discard)
		if err != nil || cfg.kills != tc.kills {
			t.Errorf("%v: kills %d, %v; want %d", tc.args, cfg.kills, err, tc.kills)
		}
	}
}
