package receiver

import (
	"bytes"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/acemq/msgaudit/bitsetbin"
	"github.com/acemq/msgaudit/connaudit"
)

// TestBindAuditor: binding gives an adapter without its own logger the
// receiver's logger and makes the receiver's metrics report the audit; an
// adapter with its own logger keeps it; an Auditor that cannot report stats
// is left alone.
func TestBindAuditor(t *testing.T) {
	t.Parallel()
	flood := func(a Auditor, n int) {
		for i := range n {
			if _, err := a.Check("c", "orders", fmt.Sprintf("ID:f-%d-1:1:1:1:1", i)); err != nil {
				t.Fatal(err)
			}
		}
	}
	newCA := func() *connaudit.Audit {
		ca, err := connaudit.New(connaudit.Options{MaxProducers: 8})
		if err != nil {
			t.Fatal(err)
		}
		return ca
	}
	now := time.Unix(1_800_000_000, 0)
	clock := func() time.Time { now = now.Add(time.Second); return now } // every read is a poll

	var recv, own bytes.Buffer
	m := new(Metrics)
	bound := ConnAudit(newCA(), ConnAuditClock(clock), ConnAuditChurnInterval(time.Second))
	bindAuditor(bound, slog.New(slog.NewTextHandler(&recv, nil)), m)
	bindAuditor(bound, slog.New(slog.NewTextHandler(&own, nil)), m) // the first binding stays
	flood(bound, 1000)
	if !strings.Contains(recv.String(), "recent_evictions=") || own.Len() != 0 {
		t.Errorf("bound adapter logged %q to the receiver's logger and %q to the second", recv.String(), own.String())
	}
	if s := m.Snapshot(); s.Audit.RecentEvictions == 0 || s.Audit.Checks != 1000 {
		t.Errorf("bound metrics report %+v", s.Audit)
	}

	recv.Reset()
	withOwn := ConnAudit(newCA(), ConnAuditClock(clock), ConnAuditLogger(slog.New(slog.NewTextHandler(&own, nil))))
	bindAuditor(withOwn, slog.New(slog.NewTextHandler(&recv, nil)), nil)
	flood(withOwn, 1000)
	if recv.Len() != 0 || !strings.Contains(own.String(), "recent_evictions=") {
		t.Errorf("adapter with its own logger logged %q to the receiver's and %q to its own", recv.String(), own.String())
	}

	m2 := new(Metrics)
	bindAuditor(plainAuditor{}, slog.New(slog.NewTextHandler(&recv, nil)), m2)
	if m2.audited() {
		t.Error("an Auditor without stats was registered")
	}
}

type plainAuditor struct{}

func (plainAuditor) Check(string, string, string) (bitsetbin.Sighting, error) {
	return bitsetbin.FirstSeen, nil
}
func (plainAuditor) Rollback(string, string, string) error { return nil }
