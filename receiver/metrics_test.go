package receiver_test

import (
	"testing"

	"github.com/acemq/msgaudit/receiver"
)

// TestMetricsSnapshot: the counters a receiver keeps, as Snapshot reads
// them for the exporters (promexport and otelmetric turn each field into
// a series; their own tests pin that mapping). Two Metrics, one per
// transport, count apart.
func TestMetricsSnapshot(t *testing.T) {
	t.Parallel()
	stomp, amqp := new(receiver.Metrics), new(receiver.Metrics)
	g := newRig(t, true, func(c *receiver.Config) { c.Metrics = stomp })
	g.r.Process(bg, msg("ID:p:1"), okHandler)
	g.r.Process(bg, msg("ID:p:1"), okHandler)
	stomp.Reconnects.Add(2)
	amqp.Delivered.Add(5)

	s, a := stomp.Snapshot(), amqp.Snapshot()
	var buckets uint64
	for _, n := range s.StoreBuckets {
		buckets += n
	}
	for name, c := range map[string]struct{ got, want uint64 }{
		"stomp Delivered":           {s.Delivered, 2},
		"amqp Delivered":            {a.Delivered, 5},
		"stomp Processed":           {s.Processed, 1},
		"stomp DuplicatesAudit":     {s.DuplicatesAudit, 1},
		"stomp DuplicatesStore":     {s.DuplicatesStore, 0},
		"amqp DuplicatesInFlight":   {a.DuplicatesInFlight, 0},
		"stomp Reconnects":          {s.Reconnects, 2},
		"stomp StoreCalls":          {s.StoreCalls, 2}, // try-claim + confirm
		"stomp StoreBuckets summed": {buckets, 2},
		"amqp StoreCalls":           {a.StoreCalls, 0},
		"stomp TooOldFailOpen":      {s.TooOldFailOpen, 0},
	} {
		if c.got != c.want {
			t.Errorf("%s = %d, want %d", name, c.got, c.want)
		}
	}
	// No connection audit reports to either: the exporters leave out the
	// msgaudit_receiver_audit_* series.
	if s.Audited || a.Audited {
		t.Errorf("Audited: stomp %v, amqp %v; want false, false", s.Audited, a.Audited)
	}
	var nilMetrics *receiver.Metrics
	if s := nilMetrics.Snapshot(); s.Delivered != 0 {
		t.Fatal("nil metrics")
	}
}
