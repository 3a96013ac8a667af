package receiver_test

import (
	"encoding/json"
	"fmt"
	"github.com/acemq/msgaudit/internal/testkit/logbuf"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/acemq/msgaudit/connaudit"
	"github.com/acemq/msgaudit/receiver"
)

// churnWarnings decodes the JSON log lines and returns the producer-churn
// warnings among them.
func churnWarnings(t *testing.T, logs string) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(logs), "\n") {
		if line == "" {
			continue
		}
		var rec map[string]any
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("log line %q: %v", line, err)
		}
		if _, ok := rec["recent_evictions"]; ok {
			if rec["level"] != "WARN" {
				t.Errorf("churn log at level %v, want WARN", rec["level"])
			}
			out = append(out, rec)
		}
	}
	return out
}

// churnRig is a receiver over a connection audit with MaxProducers 64, no
// durable tier and a tiny completed-key table, so a duplicate can only be
// caught by the audit; the churn warnings go to a JSON log on a manual
// clock. The logger and the metrics reach the adapter through
// receiver.New.
type churnRig struct {
	r       *receiver.Receiver
	a       receiver.Auditor
	metrics *receiver.Metrics
	logs    *logbuf.Buffer
	clock   *manualClock
}

func newChurnRig(t *testing.T, interval time.Duration) *churnRig {
	t.Helper()
	ca, err := connaudit.New(connaudit.Options{MaxProducers: 64})
	if err != nil {
		t.Fatal(err)
	}
	g := &churnRig{metrics: new(receiver.Metrics), logs: new(logbuf.Buffer), clock: newClock()}
	log := slog.New(slog.NewJSONHandler(g.logs, nil))
	// The adapter gets no logger and no metrics of its own: receiver.New
	// must hand it the receiver's.
	g.a = receiver.ConnAudit(ca)
	receiver.SetChurnInterval(g.a, interval)
	g.r, err = receiver.New(receiver.Config{Audit: g.a, Metrics: g.metrics, Logger: log, Clock: g.clock,
		Completed: 16, MemoryOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// TestProducerChurnFlood floods a receiver whose audit holds 64 producers
// with 10,000 distinct producer keys, while 8 real producers keep sending
// (each touched every 50 flood keys, so they stay inside the cap) and
// redeliver their previous message. The flood must show in the metrics and
// in rate-limited warnings, and the real duplicates must still be caught.
func TestProducerChurnFlood(t *testing.T) {
	t.Parallel()
	const (
		flood    = 10_000
		real     = 8
		every    = 50
		tick     = time.Millisecond // manual clock advance per flood message
		interval = 2 * time.Second
	)
	g := newChurnRig(t, interval)
	seq := make([]int, real)
	var realRuns, realDups, realSent int
	count := func(res receiver.Result) {
		if res.Ran {
			realRuns++
		}
	}
	for i := range flood {
		m := &receiver.Message{Key: fmt.Sprintf("ID:flood-%d-1:1:1:1:1", i), Destination: "/queue/orders", Consumer: "c1"}
		if res := g.r.Process(bg, m, okHandler); res.Action != receiver.Ack || !res.Ran {
			t.Fatalf("flood message %d: %+v", i, res)
		}
		g.clock.Advance(tick)
		if i%every != 0 {
			continue
		}
		for p := range real {
			if seq[p] > 0 { // redeliver the previous message: the audit must know it
				m := &receiver.Message{Key: fmt.Sprintf("ID:real-%d-1:1:1:1:%d", p, seq[p]), Destination: "/queue/orders", Consumer: "c1"}
				res := g.r.Process(bg, m, okHandler)
				if !res.Duplicate || res.Ran || res.Reason != "audit" {
					t.Fatalf("redelivery of real producer %d seq %d after %d flood keys: %+v", p, seq[p], i, res)
				}
				realDups++
			}
			seq[p]++
			m := &receiver.Message{Key: fmt.Sprintf("ID:real-%d-1:1:1:1:%d", p, seq[p]), Destination: "/queue/orders", Consumer: "c1"}
			res := g.r.Process(bg, m, okHandler)
			count(res)
			realSent++
		}
	}
	if realRuns != realSent {
		t.Errorf("real producers: %d of %d new messages ran", realRuns, realSent)
	}
	if want := real * (flood/every - 1); realDups != want {
		t.Errorf("real duplicates caught %d, want %d", realDups, want)
	}

	s := g.metrics.Snapshot()
	if s.Audit.RecentEvictions == 0 || s.Audit.Evictions < flood-64 || s.Audit.Producers > 64 {
		t.Errorf("audit stats %+v: want recent evictions > 0, evictions >= %d, producers <= 64", s.Audit, flood-64)
	}
	// The exporters publish these fields as the msgaudit_receiver_audit_*
	// series once the snapshot says Audited.
	if !s.Audited {
		t.Error("snapshot not Audited: the exporters would leave out the audit series")
	}
	for name, c := range map[string]struct{ got, want int }{
		"Producers": {s.Audit.Producers, 64},
		"Queues":    {s.Audit.Queues, 1},
		"Topics":    {s.Audit.Topics, 0},
		"Malformed": {int(s.Audit.Malformed), 0},
		"TooLong":   {int(s.Audit.TooLong), 0},
		"TooOld":    {int(s.Audit.TooOld), 0},
	} {
		if c.got != c.want {
			t.Errorf("Audit.%s = %d, want %d", name, c.got, c.want)
		}
	}

	// At most one warning per interval of the manual clock, plus the first.
	warns := churnWarnings(t, g.logs.String())
	maxWarns := int(time.Duration(flood)*tick/interval) + 1
	if len(warns) == 0 || len(warns) > maxWarns {
		t.Fatalf("%d churn warnings, want 1..%d", len(warns), maxWarns)
	}
	var reported float64
	prevTotal := 0.0
	for _, w := range warns {
		n, total := w["recent_evictions"].(float64), w["recent_evictions_total"].(float64)
		if n <= 0 || total != prevTotal+n {
			t.Errorf("warning %v: count %v does not follow the previous total %v", w, n, prevTotal)
		}
		if w["hint"] != "raise MaxProducers or investigate a producer-key flood" {
			t.Errorf("warning without the cap hint: %v", w)
		}
		if _, ok := w["evictions_total"]; !ok {
			t.Errorf("warning without evictions_total: %v", w)
		}
		reported += n
		prevTotal = total
	}
	if reported > float64(s.Audit.RecentEvictions) {
		t.Errorf("warnings report %v recent evictions, more than the %d counted", reported, s.Audit.RecentEvictions)
	}
}

// TestProducerChurnQuiet: producers inside the cap are never evicted, so no
// warning is logged however long the clock runs.
func TestProducerChurnQuiet(t *testing.T) {
	t.Parallel()
	g := newChurnRig(t, time.Millisecond)
	for i := range 2000 {
		m := &receiver.Message{Key: fmt.Sprintf("ID:p-%d-1:1:1:1:%d", i%64, i/64+1), Destination: "orders", Consumer: "c1"}
		if res := g.r.Process(bg, m, okHandler); !res.Ran {
			t.Fatalf("message %d: %+v", i, res)
		}
		g.clock.Advance(10 * time.Millisecond)
	}
	s := g.metrics.Snapshot()
	if s.Audit.Evictions != 0 || s.Audit.RecentEvictions != 0 || s.Audit.Producers != 64 || s.Audit.FirstSeen != 2000 {
		t.Errorf("audit stats %+v", s.Audit)
	}
	if w := churnWarnings(t, g.logs.String()); len(w) != 0 {
		t.Errorf("%d churn warnings without churn: %v", len(w), w)
	}
}

// TestProducerChurnRateLimit: no warning before the first poll (a second
// after the adapter was made), then exactly one warning (the first poll
// that sees recent evictions), and one more once the interval has passed.
// The check path samples about one New check in 16: 1000 checks after each
// clock step make a missed poll practically impossible (p < 1e-27).
func TestProducerChurnRateLimit(t *testing.T) {
	t.Parallel()
	g := newChurnRig(t, time.Minute)
	send := func(from, to int) {
		for i := from; i < to; i++ {
			g.r.Process(bg, &receiver.Message{Key: fmt.Sprintf("ID:f-%d-1:1:1:1:1", i), Destination: "orders"}, okHandler)
		}
	}
	send(0, 1000)
	// The clock has not moved: no poll yet.
	if w := churnWarnings(t, g.logs.String()); len(w) != 0 {
		t.Fatalf("%d warnings before the first poll interval passed", len(w))
	}
	g.clock.Advance(time.Second)
	send(1000, 2000)
	if w := churnWarnings(t, g.logs.String()); len(w) != 1 {
		t.Fatalf("%d warnings after one poll, want 1", len(w))
	}
	g.clock.Advance(30 * time.Second)
	send(2000, 3000)
	if w := churnWarnings(t, g.logs.String()); len(w) != 1 {
		t.Fatalf("%d warnings inside the interval, want 1", len(w))
	}
	g.clock.Advance(30 * time.Second)
	send(3000, 4000)
	w := churnWarnings(t, g.logs.String())
	if len(w) != 2 {
		t.Fatalf("%d warnings after the interval, want 2", len(w))
	}
	if n := w[1]["recent_evictions"].(float64); n <= 0 {
		t.Errorf("second warning counts %v evictions", n)
	}
}

// TestProducerChurnConcurrent floods one adapter from several goroutines on
// the real clock (run with -race): the counters add up and every warning
// reports a positive count.
func TestProducerChurnConcurrent(t *testing.T) {
	t.Parallel()
	ca, err := connaudit.New(connaudit.Options{MaxProducers: 64, Shards: 4})
	if err != nil {
		t.Fatal(err)
	}
	logs := new(logbuf.Buffer)
	m := new(receiver.Metrics)
	a := receiver.ConnAudit(ca)
	receiver.SetChurnInterval(a, time.Microsecond)
	// Two receivers share the adapter and the metrics.
	for range 2 {
		if _, err := receiver.New(receiver.Config{Audit: a, Metrics: m, MemoryOnly: true,
			Logger: slog.New(slog.NewJSONHandler(logs, nil))}); err != nil {
			t.Fatal(err)
		}
	}
	const workers, per = 4, 2000
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := range per {
				if _, err := a.Check("c1", "/queue/q", fmt.Sprintf("ID:w%d-%d-1:1:1:1:1", w, i)); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	waitGroup(t, &wg, testWait, "the auditing goroutines finishing")
	s := m.Snapshot() // the adapter was added twice: counted once
	if s.Audit.FirstSeen != workers*per || s.Audit.Evictions < workers*per-64 {
		t.Errorf("audit stats %+v", s.Audit)
	}
	for _, w := range churnWarnings(t, logs.String()) {
		if n := w["recent_evictions"].(float64); n <= 0 {
			t.Errorf("warning with count %v", n)
		}
	}
	if r, ok := a.(interface{ AuditStats() connaudit.Stats }); !ok || r.AuditStats().Checks != workers*per {
		t.Errorf("adapter does not report its stats (%v)", ok)
	}
}

// BenchmarkConnAuditCheck measures the adapter's Check of new ids of 16
// producers (no eviction) with churn warnings off (no logger) and on (an
// atomic clock comparison per FirstSeen sighting, a Stats read per second).
func BenchmarkConnAuditCheck(b *testing.B) {
	ids := make([]string, 1<<14)
	for i := range ids {
		ids[i] = fmt.Sprintf("ID:p-%d-1:1:1:1:%d", i%16, i/16+1)
	}
	for _, logged := range []bool{false, true} {
		b.Run(fmt.Sprintf("logger=%v", logged), func(b *testing.B) {
			b.ReportAllocs()
			var a receiver.Auditor
			for i := range b.N {
				if i%len(ids) == 0 { // a fresh audit, so every id is New
					b.StopTimer()
					ca, err := connaudit.New(connaudit.Options{Depth: 1 << 12})
					if err != nil {
						b.Fatal(err)
					}
					a = receiver.ConnAudit(ca)
					if logged {
						if _, err := receiver.New(receiver.Config{Audit: a, MemoryOnly: true, Logger: slog.New(slog.DiscardHandler)}); err != nil {
							b.Fatal(err)
						}
					}
					b.StartTimer()
				}
				if _, err := a.Check("c", "/queue/q", ids[i%len(ids)]); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
