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
	"github.com/acemq/msgaudit/idempotency"
)

// TestBindAuditor: binding gives an adapter the receiver's logger and
// clock and makes the receiver's metrics report the audit; a second
// binding leaves the first logger and clock in place; an Auditor that
// cannot report stats is left alone.
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
	bound := ConnAudit(newCA())
	SetChurnInterval(bound, time.Second)
	bindAuditor(bound, slog.New(slog.NewTextHandler(&recv, nil)), idempotency.ClockFunc(clock), m)
	frozen := idempotency.ClockFunc(func() time.Time { return time.Unix(0, 0) })
	bindAuditor(bound, slog.New(slog.NewTextHandler(&own, nil)), frozen, m) // the first binding stays
	flood(bound, 1000)
	if !strings.Contains(recv.String(), "recent_evictions=") || own.Len() != 0 {
		t.Errorf("bound adapter logged %q to the receiver's logger and %q to the second", recv.String(), own.String())
	}
	if s := m.Snapshot(); s.Audit.RecentEvictions == 0 || s.Audit.Checks != 1000 {
		t.Errorf("bound metrics report %+v", s.Audit)
	}

	var wrapped bytes.Buffer
	m3 := new(Metrics)
	inner := ConnAudit(newCA())
	SetChurnInterval(inner, time.Second)
	w := wrapAuditor{inner}
	bindAuditor(w, slog.New(slog.NewTextHandler(&wrapped, nil)), idempotency.ClockFunc(clock), m3)
	flood(w, 1000)
	if !strings.Contains(wrapped.String(), "recent_evictions=") {
		t.Errorf("wrapped adapter logged %q to the receiver's logger", wrapped.String())
	}
	if s := m3.Snapshot(); s.Audit.Checks != 1000 {
		t.Errorf("wrapped metrics report %d checks, want 1000 (counted once)", s.Audit.Checks)
	}

	m2 := new(Metrics)
	bindAuditor(plainAuditor{}, slog.New(slog.NewTextHandler(&recv, nil)), nil, m2)
	if m2.audited() {
		t.Error("an Auditor without stats was registered")
	}
}

type plainAuditor struct{}

func (plainAuditor) Check(string, string, string) (bitsetbin.Sighting, error) {
	return bitsetbin.FirstSeen, nil
}
func (plainAuditor) Rollback(string, string, string) error { return nil }

// wrapAuditor wraps an adapter, as a transport's auditor does.
type wrapAuditor struct{ Auditor }

func (w wrapAuditor) Unwrap() Auditor { return w.Auditor }
func (w wrapAuditor) AuditStats() connaudit.Stats {
	return w.Auditor.(auditStatsReporter).AuditStats()
}
