package e2e

import (
	"cmp"
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
	bad int      // bodies without a send time
	ph  []phases // msgaudit's deliveries, split by the Observer
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
	return ctx, &latencyObservation{l: l, body: m.Body, start: time.Now()}
}

// latencyObservation watches one delivery: when Process started, when its
// selectors had decided, when its handler ran and when its settlement
// began and ended.
type latencyObservation struct {
	l                                          *latencies
	body                                       []byte
	start, selected, handle, handled, settling time.Time
	settled                                    time.Time
}

func (o *latencyObservation) Selected(string, receiver.Decision, error) { o.selected = time.Now() }

func (o *latencyObservation) Handle(ctx context.Context) (context.Context, func(error)) {
	o.handle = time.Now()
	return ctx, func(error) { o.handled = time.Now() }
}

func (o *latencyObservation) Settle(ctx context.Context, _ receiver.Settlement) (context.Context, func(error)) {
	o.settling = time.Now()
	return ctx, func(error) { o.settled = time.Now() }
}

func (o *latencyObservation) End(res receiver.Result) {
	if !(res.Action == receiver.Ack && res.Ran) {
		return
	}
	now := time.Now()
	sent, ok := sentAt(o.body)
	if !ok {
		o.l.mu.Lock()
		o.l.bad++
		o.l.mu.Unlock()
		return
	}
	// A phase whose event did not happen (no selector asked, nothing to
	// settle) is empty: its time goes to the next one.
	at := func(t, prev time.Time) time.Time {
		if t.IsZero() {
			return prev
		}
		return t
	}
	start := at(o.start, sent)
	selected := at(o.selected, start)
	handle := at(o.handle, selected)
	handled := at(o.handled, handle)
	settling := at(o.settling, handled)
	settled := at(o.settled, settling)
	p := phases{
		Arrive:  start.Sub(sent),
		Select:  selected.Sub(start),
		Handler: handled.Sub(selected),
		Settle:  settled.Sub(handled),
		Total:   now.Sub(sent),
	}
	o.l.mu.Lock()
	o.l.d = append(o.l.d, p.Total)
	o.l.ph = append(o.l.ph, p)
	o.l.mu.Unlock()
}

// phases splits one delivery's time from send to settlement.
type phases struct {
	// Arrive is from send to the start of Process: the broker, the
	// network and the consumer's buffers.
	Arrive time.Duration
	// Select is the selectors' decision: an inbox's wait for a lane, its
	// BEGIN or SAVEPOINT and the key's INSERT; a store's claim.
	Select time.Duration
	// Handler is from the decision to the handler's return, the wait for
	// a handler slot included.
	Handler time.Duration
	// Settle is from the handler's return to the end of the settlement:
	// an inbox member's wait for its batch's COMMIT; a store's confirm.
	Settle time.Duration
	// Total is from send to the end of Process.
	Total time.Duration
}

// Tail is where the slowest 1 % of a latency-mode measurement's
// deliveries spent their time: the median of each phase over them, in
// milliseconds.
type Tail struct {
	Arrive  float64 `json:"arrive_ms"`
	Select  float64 `json:"select_ms"`
	Handler float64 `json:"handler_ms"`
	Settle  float64 `json:"settle_ms"`
}

// tail returns the Tail of what was recorded; nil with nothing recorded.
func (l *latencies) tail() *Tail {
	l.mu.Lock()
	ph := slices.Clone(l.ph)
	l.mu.Unlock()
	if len(ph) == 0 {
		return nil
	}
	slices.SortFunc(ph, func(a, b phases) int { return cmp.Compare(a.Total, b.Total) })
	slow := ph[len(ph)-max(len(ph)/100, 1):]
	med := func(f func(phases) time.Duration) float64 {
		v := make([]time.Duration, len(slow))
		for i, p := range slow {
			v[i] = f(p)
		}
		slices.Sort(v)
		return float64(v[(len(v)-1)/2]) / float64(time.Millisecond)
	}
	return &Tail{
		Arrive:  med(func(p phases) time.Duration { return p.Arrive }),
		Select:  med(func(p phases) time.Duration { return p.Select }),
		Handler: med(func(p phases) time.Duration { return p.Handler }),
		Settle:  med(func(p phases) time.Duration { return p.Settle }),
	}
}
