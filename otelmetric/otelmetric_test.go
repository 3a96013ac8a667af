package otelmetric_test

import (
	"strings"
	"sync/atomic"
	"testing"

	"github.com/acemq/msgaudit/internal/metricnames"
	"github.com/acemq/msgaudit/internal/testkit/metricfixture"
	"github.com/acemq/msgaudit/otelmetric"
	"github.com/acemq/msgaudit/receiver"
)

// want is an expected data point: instrument name, attributes, value.
type want struct {
	name, attrs string
	value       float64
}

// check compares got with every point of wants, and with the kind,
// description and unit internal/metricnames gives the instrument.
func check(t *testing.T, got map[string]instrument, wants []want) {
	t.Helper()
	table := map[string]metricnames.Metric{}
	for _, m := range metricnames.All {
		table[m.Name] = m
	}
	for _, w := range wants {
		in, ok := got[w.name]
		if !ok {
			t.Errorf("%s: not collected", w.name)
			continue
		}
		if v, ok := in.points[w.attrs]; !ok || v != w.value {
			t.Errorf("%s{%s} = %v (present %v), want %v; points %v", w.name, w.attrs, v, ok, w.value, in.points)
		}
		m, ok := table[w.name]
		if !ok {
			continue // the store latency's sum and count
		}
		if in.kind != m.Kind.String() || in.description != m.Help || in.unit != m.Unit {
			t.Errorf("%s: %s %q in %q; the table says %v %q in %q", w.name, in.kind, in.description, in.unit, m.Kind, m.Help, m.Unit)
		}
	}
}

// TestReceiver: every receiver instrument is collected with the value of
// its own field of a known snapshot, the attribute transport (and reason
// for the duplicates), and the kind, description and unit of the table.
func TestReceiver(t *testing.T) {
	t.Parallel()
	r, mp := newReader(t)
	if _, err := otelmetric.Receiver(mp.Meter("test"), metricfixture.Snapshot, "stomp"); err != nil {
		t.Fatal(err)
	}
	got := collect(t, r)
	tr := "transport=stomp"
	wants := []want{
		{"msgaudit_receiver_delivered_total", tr, 1}, {"msgaudit_receiver_redelivered_total", tr, 2},
		{"msgaudit_receiver_processed_total", tr, 3}, {"msgaudit_receiver_retries_total", tr, 8},
		{"msgaudit_receiver_dead_lettered_total", tr, 9}, {"msgaudit_receiver_handler_errors_total", tr, 10},
		{"msgaudit_receiver_panics_total", tr, 11}, {"msgaudit_receiver_reconnects_total", tr, 12},
		{"msgaudit_receiver_missing_keys_total", tr, 13}, {"msgaudit_receiver_too_old_fail_open_total", tr, 14},
		{"msgaudit_receiver_audit_bypass_total", tr, 15}, {"msgaudit_receiver_store_errors_total", tr, 16},
		{"msgaudit_receiver_settle_errors_total", tr, 17}, {"msgaudit_receiver_forgotten_total", tr, 18},
		{"msgaudit_receiver_audit_evictions_total", tr, 19}, {"msgaudit_receiver_audit_recent_evictions_total", tr, 20},
		{"msgaudit_receiver_audit_destination_evictions_total", tr, 21}, {"msgaudit_receiver_audit_malformed_total", tr, 22},
		{"msgaudit_receiver_audit_too_long_total", tr, 23}, {"msgaudit_receiver_audit_too_old_total", tr, 24},
		{"msgaudit_receiver_audit_producers", tr, 25}, {"msgaudit_receiver_audit_queues", tr, 26},
		{"msgaudit_receiver_audit_topics", tr, 27},
		{"msgaudit_receiver_in_flight", tr, 28}, {"msgaudit_receiver_oldest_in_flight_seconds", tr, 2.5},
		{"msgaudit_receiver_duplicates_total", "reason=audit," + tr, 4},
		{"msgaudit_receiver_duplicates_total", "reason=store," + tr, 5},
		{"msgaudit_receiver_duplicates_total", "reason=in-flight," + tr, 6},
		{"msgaudit_receiver_duplicates_total", "reason=other," + tr, 7},
		{"msgaudit_receiver_store_latency_seconds_sum", tr, 1.5},
		{"msgaudit_receiver_store_latency_seconds_count", tr, 78},
	}
	check(t, got, wants)
	if len(got) != len(wants)-3 {
		t.Errorf("%d instruments collected, want %d", len(got), len(wants)-3)
	}
	for _, name := range []string{"msgaudit_receiver_store_latency_seconds_sum", "msgaudit_receiver_store_latency_seconds_count"} {
		if in := got[name]; in.kind != "counter" {
			t.Errorf("%s is a %s, want a counter", name, in.kind)
		}
	}
	if u := got["msgaudit_receiver_store_latency_seconds_sum"].unit; u != "s" {
		t.Errorf("the latency sum's unit is %q, want s", u)
	}
}

// TestReceiverUnaudited: until a snapshot says Audited, the connection
// audit's instruments report nothing, as promexport leaves them out; the
// others do.
func TestReceiverUnaudited(t *testing.T) {
	t.Parallel()
	r, mp := newReader(t)
	snap := func() receiver.Snapshot { s := metricfixture.Snapshot(); s.Audited = false; return s }
	if _, err := otelmetric.Receiver(mp.Meter("test"), snap, "amqp"); err != nil {
		t.Fatal(err)
	}
	got := collect(t, r)
	for name := range got {
		if strings.HasPrefix(name, "msgaudit_receiver_audit_") && name != "msgaudit_receiver_audit_bypass_total" {
			t.Errorf("%s collected from an unaudited snapshot", name)
		}
	}
	check(t, got, []want{{"msgaudit_receiver_delivered_total", "transport=amqp", 1}})
}

// TestTransport: every counter of receiver.TransportStats is collected
// with the value of its own field, Generation is not.
func TestTransport(t *testing.T) {
	t.Parallel()
	r, mp := newReader(t)
	if _, err := otelmetric.Transport(mp.Meter("test"), metricfixture.Stats, "amqp"); err != nil {
		t.Fatal(err)
	}
	got := collect(t, r)
	tr := "transport=amqp"
	wants := []want{
		{"msgaudit_transport_connects_total", tr, 1}, {"msgaudit_transport_reconnects_total", tr, 2},
		{"msgaudit_transport_connect_errors_total", tr, 3}, {"msgaudit_transport_lost_total", tr, 4},
		{"msgaudit_transport_acks_total", tr, 5}, {"msgaudit_transport_requeues_total", tr, 6},
		{"msgaudit_transport_retry_copies_total", tr, 7}, {"msgaudit_transport_local_retries_total", tr, 8},
		{"msgaudit_transport_dead_letter_copies_total", tr, 9}, {"msgaudit_transport_dead_letter_errors_total", tr, 10},
		{"msgaudit_transport_oversized_total", tr, 11}, {"msgaudit_transport_dropped_total", tr, 12},
		{"msgaudit_transport_stale_acks_total", tr, 13}, {"msgaudit_transport_ack_errors_total", tr, 14},
	}
	check(t, got, wants)
	if len(got) != len(wants) {
		t.Errorf("%d instruments collected, want %d", len(got), len(wants))
	}
}

// TestUnregister: after Unregister, a collection calls none of the
// snapshot functions and reports nothing.
func TestUnregister(t *testing.T) {
	t.Parallel()
	r, mp := newReader(t)
	meter := mp.Meter("test")
	var snaps, stats, samples atomic.Int64
	regs := make([]interface{ Unregister() error }, 0, 3)
	reg, err := otelmetric.Receiver(meter, func() receiver.Snapshot { snaps.Add(1); return metricfixture.Snapshot() }, "stomp")
	if err != nil {
		t.Fatal(err)
	}
	regs = append(regs, reg)
	reg, err = otelmetric.Transport(meter, func() receiver.TransportStats { stats.Add(1); return metricfixture.Stats() }, "stomp")
	if err != nil {
		t.Fatal(err)
	}
	regs = append(regs, reg)
	reg, err = otelmetric.Backlog(meter, countingSample(&samples), "pg")
	if err != nil {
		t.Fatal(err)
	}
	regs = append(regs, reg)
	if got := collect(t, r); len(got) == 0 || snaps.Load() != 1 || stats.Load() != 1 || samples.Load() != 1 {
		t.Fatalf("registered: %d instruments, %d snapshots, %d stats, %d samples; want some and 1, 1, 1",
			len(got), snaps.Load(), stats.Load(), samples.Load())
	}
	for _, reg := range regs {
		if err := reg.Unregister(); err != nil {
			t.Fatal(err)
		}
	}
	if got := collect(t, r); len(got) != 0 || snaps.Load() != 1 || stats.Load() != 1 || samples.Load() != 1 {
		t.Errorf("unregistered: %d instruments, %d snapshots, %d stats, %d samples; want 0 and 1, 1, 1",
			len(got), snaps.Load(), stats.Load(), samples.Load())
	}
}

// TestNilArguments: a nil meter or function is an error, not a panic at
// the first collection.
func TestNilArguments(t *testing.T) {
	t.Parallel()
	_, mp := newReader(t)
	meter := mp.Meter("test")
	if _, err := otelmetric.Receiver(meter, nil, "x"); err == nil {
		t.Error("Receiver with a nil snapshot: no error")
	}
	if _, err := otelmetric.Transport(nil, metricfixture.Stats, "x"); err == nil {
		t.Error("Transport with a nil meter: no error")
	}
	if _, err := otelmetric.Backlog(meter, nil, "x"); err == nil {
		t.Error("Backlog with a nil sample: no error")
	}
}
