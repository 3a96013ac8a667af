package idempotency

import (
	"context"
	"testing"
	"time"

	"github.com/acemq/msgaudit/internal/testkit/testwait"
)

// testClock is a settable clock for the package's own tests.
type testClock struct{ t time.Time }

func (c *testClock) Now() time.Time { return c.t }

func TestMemoryPurge(t *testing.T) {
	t.Parallel()
	ctx := testwait.Context(t, time.Minute)
	clock := &testClock{t: time.Unix(1e9, 0)}
	m := memStore(t, Options{ClaimTTL: time.Minute, Retention: time.Hour, Clock: clock})
	for i := range 300 {
		_, c, err := m.TryClaim(ctx, Key{Namespace: "q", ID: string(rune('a'+i%26)) + time.Duration(i).String()})
		if err != nil {
			t.Fatal(err)
		}
		if i%3 == 0 {
			if err := m.Confirm(ctx, c); err != nil {
				t.Fatal(err)
			}
		}
	}
	if n := m.Purge(); n != 0 || m.Len() != 300 {
		t.Fatalf("Purge with nothing expired = %d (len %d)", n, m.Len())
	}
	clock.t = clock.t.Add(2 * time.Minute)
	if n := m.Purge(); n != 200 || m.Len() != 100 {
		t.Fatalf("Purge of expired claims = %d (len %d), want 200 (100)", n, m.Len())
	}
	clock.t = clock.t.Add(time.Hour)
	if n := m.Purge(); n != 100 || m.Len() != 0 {
		t.Fatalf("Purge of expired confirmations = %d (len %d), want 100 (0)", n, m.Len())
	}
}

// memStore returns a Memory with options o, failing tb if NewMemory refuses
// them.
func memStore(tb testing.TB, o Options) *Memory {
	tb.Helper()
	m, err := NewMemory(o)
	if err != nil {
		tb.Fatalf("NewMemory(%+v): %v", o, err)
	}
	return m
}

// TestMemoryAllocs: confirming, checking and refusing a claim allocate
// nothing; taking a claim allocates only its token (map growth aside).
func TestMemoryAllocs(t *testing.T) {
	ctx := testwait.Context(t, time.Minute)
	m := memStore(t, Options{})
	k := Key{Namespace: "q", ID: "ID:host-1-2-3:1:1"}
	_, c, _ := m.TryClaim(ctx, k)
	if n := testing.AllocsPerRun(100, func() { _, _, _ = m.TryClaim(ctx, k) }); n != 0 {
		t.Errorf("refused TryClaim: %v allocs, want 0", n)
	}
	if n := testing.AllocsPerRun(100, func() { _, _ = m.IsConfirmed(ctx, k) }); n != 0 {
		t.Errorf("IsConfirmed: %v allocs, want 0", n)
	}
	if n := testing.AllocsPerRun(100, func() { _, _ = m.Renew(ctx, c) }); n != 0 {
		t.Errorf("Renew: %v allocs, want 0", n)
	}
	if err := m.Release(ctx, c); err != nil {
		t.Fatal(err)
	}
	if n := testing.AllocsPerRun(100, func() {
		o, c, _ := m.TryClaim(ctx, k)
		if o != Claimed || m.Release(ctx, c) != nil {
			panic("claim/release cycle broke")
		}
	}); n != 1 {
		t.Errorf("TryClaim+Release of a free key: %v allocs, want 1 (the token)", n)
	}
	_, c, _ = m.TryClaim(ctx, k)
	if n := testing.AllocsPerRun(1, func() { _ = m.Confirm(ctx, c) }); n != 0 {
		t.Errorf("Confirm: %v allocs, want 0", n)
	}
}

func TestClockFunc(t *testing.T) {
	t.Parallel()
	at := time.Unix(42, 0)
	if got := ClockFunc(func() time.Time { return at }).Now(); !got.Equal(at) {
		t.Fatalf("ClockFunc.Now = %v", got)
	}
}

// TestMemoryDefaultClock: with the default (monotonic) clock, a claim
// expires one TTL after the wall time of the call.
func TestMemoryDefaultClock(t *testing.T) {
	t.Parallel()
	m := memStore(t, Options{ClaimTTL: time.Hour})
	before := time.Now()
	_, c, err := m.TryClaim(context.Background(), Key{ID: "m1"})
	after := time.Now()
	if err != nil {
		t.Fatal(err)
	}
	// A second of slack for wall clock adjustments since NewMemory.
	if c.Expires.Before(before.Add(time.Hour-time.Second)) || c.Expires.After(after.Add(time.Hour+time.Second)) {
		t.Fatalf("claim expires %v, want about %v", c.Expires, before.Add(time.Hour))
	}
}
