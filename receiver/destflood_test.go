package receiver_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/acemq/msgaudit/receiver"
)

// TestDestinationFlood sends one message to each of 5,000 queues through a
// receiver whose connection audit holds 1,000 destination audits: 4,000
// are evicted. The evictions must show in the metrics snapshot, marked
// Audited so that the exporters publish them
// (msgaudit_receiver_audit_destination_evictions_total), and in
// rate-limited warnings, as producer churn does.
func TestDestinationFlood(t *testing.T) {
	t.Parallel()
	const (
		queues   = 5000
		tick     = time.Millisecond
		interval = 2 * time.Second
	)
	g := newChurnRig(t, interval)
	for i := range queues {
		m := &receiver.Message{Key: fmt.Sprintf("ID:p-1:1:1:1:%d", i+1), Destination: fmt.Sprintf("/queue/flood-%d", i), Consumer: "c1"}
		if res := g.r.Process(bg, m, okHandler); res.Action != receiver.Ack || !res.Ran {
			t.Fatalf("message to queue %d: %+v", i, res)
		}
		g.clock.Advance(tick)
	}
	s := g.metrics.Snapshot()
	if want := uint64(queues - 1000); s.Audit.AuditEvictions != want || s.Audit.Queues != 1000 {
		t.Fatalf("snapshot: %d destination evictions, %d queues; want %d, 1000", s.Audit.AuditEvictions, s.Audit.Queues, want)
	}
	if !s.Audited {
		t.Fatal("snapshot not Audited: the exporters would leave out the destination evictions")
	}
	var warns []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(g.logs.String()), "\n") {
		var rec map[string]any
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("log line %q: %v", line, err)
		}
		if _, ok := rec["destination_evictions"]; ok {
			warns = append(warns, rec)
		}
	}
	maxWarns := int(time.Duration(queues)*tick/interval) + 1
	if len(warns) == 0 || len(warns) > maxWarns {
		t.Fatalf("%d destination-eviction warnings, want 1..%d", len(warns), maxWarns)
	}
	var reported float64
	for _, w := range warns {
		if w["level"] != "WARN" {
			t.Errorf("warning at level %v", w["level"])
		}
		reported += w["destination_evictions"].(float64)
	}
	if reported == 0 || reported > float64(s.Audit.AuditEvictions) {
		t.Errorf("warnings report %v destination evictions of %d", reported, s.Audit.AuditEvictions)
	}
}
