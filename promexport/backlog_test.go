package promexport_test

import (
	"context"
	"errors"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/acemq/msgaudit/idempotency"
	"github.com/acemq/msgaudit/idempotency/sqlitestore"
	"github.com/acemq/msgaudit/promexport"
	"github.com/acemq/msgaudit/receiver"
)

// metrics scrapes reg and returns every gauge's and counter's value by
// metric name.
func metrics(t *testing.T, reg *prometheus.Registry) map[string]float64 {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, f := range families {
		for _, m := range f.GetMetric() {
			switch {
			case m.GetGauge() != nil:
				got[f.GetName()] = m.GetGauge().GetValue()
			case m.GetCounter() != nil:
				got[f.GetName()] = m.GetCounter().GetValue()
			}
		}
	}
	return got
}

// fakeSampler answers with next (or err) and counts its calls.
type fakeSampler struct {
	mu    sync.Mutex
	next  idempotency.Backlog
	err   error
	calls atomic.Int64
}

func (f *fakeSampler) set(b idempotency.Backlog, err error) {
	f.mu.Lock()
	f.next, f.err = b, err
	f.mu.Unlock()
}

func (f *fakeSampler) sample(ctx context.Context) (idempotency.Backlog, error) {
	f.calls.Add(1)
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.next, f.err
}

// fakeNow is a clock the test moves.
type fakeNow struct{ ns atomic.Int64 }

func (c *fakeNow) now() time.Time          { return time.Unix(0, c.ns.Load()) }
func (c *fakeNow) advance(d time.Duration) { c.ns.Add(int64(d)) }

// TestBacklogCache: the gauges show the sample's values; scrapes within
// the cache duration reuse the sample, the first scrape after it takes a
// new one.
func TestBacklogCache(t *testing.T) {
	f := new(fakeSampler)
	f.set(idempotency.Backlog{Held: 3, OldestHeld: 1500 * time.Millisecond, Rows: 1000, OldestRow: time.Hour}, nil)
	clock := new(fakeNow)
	c := promexport.Backlog(f.sample, "orders")
	promexport.SetBacklogTiming(c, 10*time.Second, time.Second, clock.now)
	reg := prometheus.NewRegistry()
	reg.MustRegister(c)

	want := map[string]float64{
		"msgaudit_backlog_held": 3, "msgaudit_backlog_oldest_held_seconds": 1.5,
		"msgaudit_backlog_rows": 1000, "msgaudit_backlog_oldest_row_seconds": 3600,
		"msgaudit_backlog_sample_errors_total": 0,
	}
	check := func(want map[string]float64) {
		t.Helper()
		got := metrics(t, reg)
		for k, v := range want {
			if got[k] != v {
				t.Errorf("%s = %v, want %v", k, got[k], v)
			}
		}
	}
	check(want)
	f.set(idempotency.Backlog{Held: 4}, nil)
	clock.advance(9 * time.Second)
	check(want)
	if n := f.calls.Load(); n != 1 {
		t.Fatalf("two scrapes within 10 s took %d samples, want 1", n)
	}
	clock.advance(time.Second)
	check(map[string]float64{"msgaudit_backlog_held": 4, "msgaudit_backlog_rows": 0, "msgaudit_backlog_oldest_row_seconds": 0})
	if n := f.calls.Load(); n != 2 {
		t.Fatalf("a scrape 10 s after the sample took %d samples in all, want 2", n)
	}
}

// TestBacklogErrors: before any good sample only the error counter is
// exported; a failed sample counts an error, keeps the last good values,
// and is not retried before the cache duration.
func TestBacklogErrors(t *testing.T) {
	f := new(fakeSampler)
	f.set(idempotency.Backlog{}, errors.New("database down"))
	clock := new(fakeNow)
	c := promexport.Backlog(f.sample, "orders")
	promexport.SetBacklogTiming(c, 10*time.Second, time.Second, clock.now)
	reg := prometheus.NewRegistry()
	reg.MustRegister(c)

	got := metrics(t, reg)
	if _, ok := got["msgaudit_backlog_rows"]; ok || got["msgaudit_backlog_sample_errors_total"] != 1 {
		t.Fatalf("after a failed first sample: %v; want only the error counter, at 1", got)
	}
	clock.advance(10 * time.Second)
	f.set(idempotency.Backlog{Held: 2, Rows: 7}, nil)
	if got := metrics(t, reg); got["msgaudit_backlog_held"] != 2 || got["msgaudit_backlog_rows"] != 7 {
		t.Fatalf("after a good sample: %v", got)
	}
	clock.advance(10 * time.Second)
	f.set(idempotency.Backlog{}, errors.New("database down"))
	got = metrics(t, reg)
	if got["msgaudit_backlog_held"] != 2 || got["msgaudit_backlog_rows"] != 7 || got["msgaudit_backlog_sample_errors_total"] != 2 {
		t.Fatalf("after a failed sample: %v; want the last good values and 2 errors", got)
	}
	metrics(t, reg)
	if n := f.calls.Load(); n != 3 {
		t.Fatalf("%d samples, want 3: a failed one is cached too", n)
	}
}

// TestBacklogTimeout: the sample's context ends after the timeout (2 s by
// default); a sample that runs into it counts as an error.
func TestBacklogTimeout(t *testing.T) {
	var left time.Duration
	c := promexport.Backlog(func(ctx context.Context) (idempotency.Backlog, error) {
		d, ok := ctx.Deadline()
		if !ok {
			t.Error("the sample's context has no deadline")
		}
		left = time.Until(d)
		return idempotency.Backlog{Rows: 1}, nil
	}, "orders")
	reg := prometheus.NewRegistry()
	reg.MustRegister(c)
	metrics(t, reg)
	if left <= time.Second || left > 2*time.Second {
		t.Fatalf("the sample's deadline was %v away, want 2 s", left)
	}

	c = promexport.Backlog(func(ctx context.Context) (idempotency.Backlog, error) {
		<-ctx.Done()
		return idempotency.Backlog{}, ctx.Err()
	}, "stuck")
	promexport.SetBacklogTiming(c, 10*time.Second, 20*time.Millisecond, nil)
	reg = prometheus.NewRegistry()
	reg.MustRegister(c)
	if got := metrics(t, reg); got["msgaudit_backlog_sample_errors_total"] != 1 {
		t.Fatalf("a sample that timed out: %v; want 1 error", got)
	}
}

// openSQLite opens a store in a temporary file.
func openSQLite(t *testing.T) *sqlitestore.Store {
	t.Helper()
	s, err := sqlitestore.Open(context.Background(), filepath.Join(t.TempDir(), "idem.db"), sqlitestore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// TestBacklogStore: the collector on a real store's Backlog exports its
// held claim and rows.
func TestBacklogStore(t *testing.T) {
	s := openSQLite(t)
	ctx := context.Background()
	if _, _, err := s.TryClaim(ctx, idempotency.Key{Namespace: "q", ID: "held"}); err != nil {
		t.Fatal(err)
	}
	_, c, err := s.TryClaim(ctx, idempotency.Key{Namespace: "q", ID: "done"})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Confirm(ctx, c); err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(promexport.Backlog(s.Backlog, "orders"))
	got := metrics(t, reg)
	if got["msgaudit_backlog_held"] != 1 || got["msgaudit_backlog_rows"] != 2 || got["msgaudit_backlog_oldest_held_seconds"] <= 0 ||
		got["msgaudit_backlog_oldest_row_seconds"] < got["msgaudit_backlog_oldest_held_seconds"] {
		t.Fatalf("one held claim and one confirmation: %v", got)
	}
}

// TestStuckHandlerGauges: a handler that does not return shows in the
// receiver's in-flight gauges and, through its held claim, in the store's
// backlog gauges; both go back to zero once it returns and the delivery
// is confirmed.
func TestStuckHandlerGauges(t *testing.T) {
	s := openSQLite(t)
	m := new(receiver.Metrics)
	r, err := receiver.New(receiver.Config{Store: s, Metrics: m})
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(promexport.Receiver(m.Snapshot, "orders"))
	backlog := promexport.Backlog(s.Backlog, "orders")
	promexport.SetBacklogTiming(backlog, 0, 2*time.Second, nil) // a sample at every scrape
	reg.MustRegister(backlog)

	release, entered := make(chan struct{}), make(chan struct{})
	var res receiver.Result
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		res = r.Process(context.Background(), &receiver.Message{Key: "k", Destination: "/queue/orders"},
			func(context.Context, *receiver.Message) error {
				close(entered)
				<-release
				return nil
			})
	}()
	<-entered
	const stuck = 200 * time.Millisecond
	time.Sleep(stuck)
	g := metrics(t, reg)
	t.Logf("a handler stuck for %v: msgaudit_receiver_in_flight %v, msgaudit_receiver_oldest_in_flight_seconds %.3f, msgaudit_backlog_held %v, msgaudit_backlog_oldest_held_seconds %.3f",
		stuck, g["msgaudit_receiver_in_flight"], g["msgaudit_receiver_oldest_in_flight_seconds"], g["msgaudit_backlog_held"], g["msgaudit_backlog_oldest_held_seconds"])
	if g["msgaudit_receiver_in_flight"] != 1 || g["msgaudit_receiver_oldest_in_flight_seconds"] < stuck.Seconds() {
		t.Errorf("in_flight %v, oldest_in_flight_seconds %v; want 1 and at least %v", g["msgaudit_receiver_in_flight"], g["msgaudit_receiver_oldest_in_flight_seconds"], stuck.Seconds())
	}
	if g["msgaudit_backlog_held"] != 1 || g["msgaudit_backlog_oldest_held_seconds"] <= 0 {
		t.Errorf("backlog_held %v, backlog_oldest_held_seconds %v; want 1 and more than 0", g["msgaudit_backlog_held"], g["msgaudit_backlog_oldest_held_seconds"])
	}
	close(release)
	wg.Wait()
	if res.Action != receiver.Ack {
		t.Fatalf("the delivery ended with %v, want Ack", res.Action)
	}
	g = metrics(t, reg)
	t.Logf("after it returned: msgaudit_receiver_in_flight %v, msgaudit_backlog_held %v, msgaudit_backlog_rows %v",
		g["msgaudit_receiver_in_flight"], g["msgaudit_backlog_held"], g["msgaudit_backlog_rows"])
	if g["msgaudit_receiver_in_flight"] != 0 || g["msgaudit_backlog_held"] != 0 || g["msgaudit_backlog_oldest_held_seconds"] != 0 {
		t.Errorf("after it returned: in_flight %v, backlog_held %v, backlog_oldest_held_seconds %v; want 0",
			g["msgaudit_receiver_in_flight"], g["msgaudit_backlog_held"], g["msgaudit_backlog_oldest_held_seconds"])
	}
	if g["msgaudit_backlog_rows"] != 1 {
		t.Errorf("after it returned: backlog_rows %v, want 1 (the confirmation)", g["msgaudit_backlog_rows"])
	}
}
