package e2e

import (
	"context"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/acemq/msgaudit/receiver"
)

// stampLen is the length of the send time at the head of a latency-mode
// body: Unix nanoseconds in 19 decimal digits.
const stampLen = 19

// stamp writes the current time into the head of body (at least
// stampLen bytes).
func stamp(body []byte, now time.Time) {
	n := now.UnixNano()
	for i := stampLen - 1; i >= 0; i-- {
		body[i] = byte('0' + n%10)
		n /= 10
	}
}

// sentAt reads the send time stamp wrote; ok is false for a body without
// one.
func sentAt(body []byte) (time.Time, bool) {
	if len(body) < stampLen {
		return time.Time{}, false
	}
	n, err := strconv.ParseInt(string(body[:stampLen]), 10, 64)
	if err != nil || n <= 0 {
		return time.Time{}, false
	}
	return time.Unix(0, n), true
}

// paced returns the body function of latency mode: the i-th message
// (from 0) is due at start + i/Rate; it waits until then and returns body
// with the time it is sent at its head. A sender that fell behind sends at
// once, so the offered rate holds on average.
func (p *plan) paced(start time.Time, body []byte) func(i int) []byte {
	interval := float64(time.Second) / p.Rate
	return func(i int) []byte {
		if d := time.Until(start.Add(time.Duration(float64(i) * interval))); d > 0 {
			time.Sleep(d)
		}
		b := slices.Clone(body)
		stamp(b, time.Now())
		return b
	}
}

// latencies collects the time from send to settlement of each message of
// one measurement. As a receiver.Observer it records a delivery when
// Process ends with an acknowledgement after running the handler: after
// the inbox's COMMIT or the store's confirm, right before the consumer
// writes the ACK.
type latencies struct {
	mu  sync.Mutex
	d   []time.Duration
	bad int // bodies without a send time
}

// record adds the time since body's send time.
func (l *latencies) record(body []byte) {
	now := time.Now()
	t, ok := sentAt(body)
	l.mu.Lock()
	if ok {
		l.d = append(l.d, now.Sub(t))
	} else {
		l.bad++
	}
	l.mu.Unlock()
}

// quantiles returns the p50 and p99 of what was recorded, in
// milliseconds, and how many values they are taken from.
func (l *latencies) quantiles() (p50, p99 float64, n int) {
	l.mu.Lock()
	d := slices.Clone(l.d)
	l.mu.Unlock()
	if len(d) == 0 {
		return 0, 0, 0
	}
	slices.Sort(d)
	q := func(f float64) float64 {
		i := int(f*float64(len(d))+0.5) - 1
		i = min(max(i, 0), len(d)-1)
		return float64(d[i]) / float64(time.Millisecond)
	}
	return q(0.50), q(0.99), len(d)
}

// Start implements receiver.Observer.
func (l *latencies) Start(ctx context.Context, m *receiver.Message) (context.Context, receiver.Observation) {
	return ctx, latencyObservation{l, m.Body}
}

// latencyObservation watches one delivery for its End.
type latencyObservation struct {
	l    *latencies
	body []byte
}

func (latencyObservation) Selected(string, receiver.Decision, error) {}

func (latencyObservation) Handle(ctx context.Context) (context.Context, func(error)) {
	return ctx, func(error) {}
}

func (latencyObservation) Settle(ctx context.Context, _ receiver.Settlement) (context.Context, func(error)) {
	return ctx, func(error) {}
}

func (o latencyObservation) End(res receiver.Result) {
	if res.Action == receiver.Ack && res.Ran {
		o.l.record(o.body)
	}
}
