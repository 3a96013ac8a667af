package e2e

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/acemq/msgaudit/receiver"
)

// TestStamp: a body stamped with a time reads back as that time to the
// nanosecond, and a body without a stamp is told apart.
func TestStamp(t *testing.T) {
	for _, at := range []time.Time{time.Unix(1, 0), time.Unix(1_700_000_000, 123_456_789), time.Now()} {
		b := bytes.Repeat([]byte("a"), 40)
		stamp(b, at)
		got, ok := sentAt(b)
		if !ok || !got.Equal(at) {
			t.Errorf("stamp %v: read %v, %t", at, got, ok)
		}
		if string(b[stampLen:]) != strings.Repeat("a", 40-stampLen) {
			t.Errorf("stamp %v wrote past its %d bytes: %q", at, stampLen, b)
		}
	}
	for _, b := range []string{"", "123", strings.Repeat("a", 40), strings.Repeat("0", 40)} {
		if got, ok := sentAt([]byte(b)); ok {
			t.Errorf("sentAt(%q) = %v, true; want no send time", b, got)
		}
	}
}

// TestQuantiles: p50 and p99 of known sets, nearest rank.
func TestQuantiles(t *testing.T) {
	tests := []struct {
		ms       []int
		p50, p99 float64
	}{
		{[]int{5}, 5, 5},
		{[]int{1, 2}, 1, 2},
		{[]int{3, 1, 2}, 2, 3},
		{func() []int { // 1..100
			v := make([]int, 100)
			for i := range v {
				v[100-1-i] = i + 1
			}
			return v
		}(), 50, 99},
		{func() []int { // 1..1000
			v := make([]int, 1000)
			for i := range v {
				v[i] = i + 1
			}
			return v
		}(), 500, 990},
	}
	for _, tt := range tests {
		l := &latencies{}
		for _, ms := range tt.ms {
			l.d = append(l.d, time.Duration(ms)*time.Millisecond)
		}
		p50, p99, n := l.quantiles()
		if p50 != tt.p50 || p99 != tt.p99 || n != len(tt.ms) {
			t.Errorf("%d values: p50 %v p99 %v n %d; want %v %v %d", len(tt.ms), p50, p99, n, tt.p50, tt.p99, len(tt.ms))
		}
	}
	if p50, p99, n := (&latencies{}).quantiles(); p50 != 0 || p99 != 0 || n != 0 {
		t.Errorf("no values: %v %v %d", p50, p99, n)
	}
}

// TestLatencyMode runs a bare client and msgaudit's inbox on SQLite on the
// three brokers with the messages sent at a fixed rate while they consume: every
// sample has latencies, the sending was paced (the run cannot end before
// the last message was due), and the table has the latency columns.
func TestLatencyMode(t *testing.T) {
	o := services(t)
	const n, rate = 200, 400.0
	o.Messages, o.Rounds, o.Timeout, o.Dir, o.Rate = n, 1, 30*time.Second, t.TempDir(), rate
	o.Variants = []string{"inbox-sqlite"}
	var progress bytes.Buffer
	o.Progress = &progress
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	rep, err := Run(ctx, o)
	if err != nil {
		t.Fatalf("Run: %v\nprogress:\n%s", err, progress.String())
	}
	if len(rep.Samples) != 6 {
		t.Fatalf("%d samples, want 6 (bare and inbox-sqlite on three brokers)", len(rep.Samples))
	}
	due := time.Duration(float64(n-1) / rate * float64(time.Second))
	for _, s := range rep.Samples {
		if !(s.P50Millis > 0) || s.P99Millis < s.P50Millis {
			t.Errorf("%s/%s: p50 %v ms, p99 %v ms; want 0 < p50 <= p99", s.Broker, s.Variant, s.P50Millis, s.P99Millis)
		}
		switch tl := s.Tail; {
		case s.Variant == "bare" && tl != nil:
			t.Errorf("%s/bare has a Tail %+v; only msgaudit's consumers are observed", s.Broker, *tl)
		case s.Variant != "bare" && tl == nil:
			t.Errorf("%s/%s has no Tail", s.Broker, s.Variant)
		case tl != nil && (tl.Arrive < 0 || tl.Select < 0 || tl.Handler <= 0 || tl.Settle < 0 || tl.Arrive+tl.Select+tl.Handler+tl.Settle > 2*s.P99Millis+1):
			t.Errorf("%s/%s: Tail %+v with p99 %v ms; want phases >= 0, a handler that took time, adding up to about the slowest deliveries' time", s.Broker, s.Variant, *tl, s.P99Millis)
		}
		if time.Duration(s.Seconds*float64(time.Second)) < due {
			t.Errorf("%s/%s took %.3fs; the last message was not due before %v", s.Broker, s.Variant, s.Seconds, due)
		}
	}
	var md bytes.Buffer
	if err := rep.Markdown(&md); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(md.String(), "| Broker | Variant | p99 ms | arrive | select | handler | settle |") {
		t.Errorf("Markdown has no table of the slowest deliveries' phases:\n%s", md.String())
	}
	if !strings.Contains(md.String(), "| p50 ms | p99 ms |") || !strings.Contains(md.String(), "sent at 400 msgs/s") {
		t.Errorf("Markdown has no latency columns or rate:\n%s", md.String())
	}
}

// TestTail: the phases of the slowest 1 % are the medians over them, not
// over every delivery; a delivery without a selector or a settlement
// gives its time to the next phase.
func TestTail(t *testing.T) {
	l := &latencies{}
	ms := func(x int) time.Duration { return time.Duration(x) * time.Millisecond }
	for range 300 { // fast: 1 ms each phase
		l.ph = append(l.ph, phases{Arrive: ms(1), Select: ms(1), Handler: ms(1), Settle: ms(1), Total: ms(4)})
	}
	// the slowest 3 (1 % of 300): their Select and Settle dominate
	l.ph = append(l.ph,
		phases{Arrive: ms(1), Select: ms(20), Handler: ms(1), Settle: ms(8), Total: ms(30)},
		phases{Arrive: ms(2), Select: ms(30), Handler: ms(1), Settle: ms(9), Total: ms(42)},
		phases{Arrive: ms(3), Select: ms(40), Handler: ms(2), Settle: ms(10), Total: ms(55)},
	)
	got := l.tail()
	want := Tail{Arrive: 2, Select: 30, Handler: 1, Settle: 9}
	if got == nil || *got != want {
		t.Errorf("tail = %+v, want %+v", got, want)
	}
	if (&latencies{}).tail() != nil {
		t.Error("tail of nothing is not nil")
	}

	// An observation with no selector and nothing to settle.
	l = &latencies{}
	body := make([]byte, 40)
	stamp(body, time.Now().Add(-10*time.Millisecond))
	o := &latencyObservation{l: l, body: body, start: time.Now().Add(-8 * time.Millisecond)}
	o.Handle(context.Background())
	o.handled = time.Now()
	o.End(receiver.Result{Action: receiver.Ack, Ran: true})
	if len(l.ph) != 1 || len(l.d) != 1 {
		t.Fatalf("recorded %d phases, %d latencies; want 1", len(l.ph), len(l.d))
	}
	p := l.ph[0]
	if p.Arrive < ms(1) || p.Select < 0 || p.Handler < ms(7) || p.Settle < 0 || p.Total < ms(10) || p.Arrive+p.Select+p.Handler+p.Settle > p.Total {
		t.Errorf("phases %+v: want arrive ~2 ms, handler ~8 ms (the slot wait included), adding up to at most Total", p)
	}
	// Not acknowledged after running: not recorded.
	o = &latencyObservation{l: l, body: body, start: time.Now()}
	o.End(receiver.Result{Action: receiver.Requeue})
	if len(l.ph) != 1 {
		t.Errorf("a requeued delivery was recorded")
	}
}
