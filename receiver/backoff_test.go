package receiver

import (
	"testing"
	"time"

	"pgregory.net/rapid"
)

// TestBackoff checks the delay bounds: wait n is within
// (base·(1-Jitter), base], base = min(Initial·2ⁿ, max(Max, Initial)).
func TestBackoff(t *testing.T) {
	t.Parallel()
	rapid.Check(t, func(t *rapid.T) {
		b := Backoff{
			Initial: time.Duration(rapid.Int64Range(1, int64(time.Second)).Draw(t, "initial")),
			Max:     time.Duration(rapid.Int64Range(1, int64(time.Minute)).Draw(t, "max")),
			Jitter:  rapid.Float64Range(0, 1).Draw(t, "jitter"),
		}.withDefaults(time.Millisecond, time.Second, 0.5)
		n := rapid.IntRange(0, 200).Draw(t, "n")
		ceil := max(b.Max, b.Initial)
		want := b.Initial
		for range n {
			if want >= ceil {
				break
			}
			want *= 2
		}
		want = min(want, ceil)
		d := b.Delay(n)
		lo := time.Duration(float64(want) * (1 - b.Jitter))
		if d > want || d < lo-1 || d <= 0 {
			t.Fatalf("Delay(%d) = %v outside [%v, %v]", n, d, lo, want)
		}
	})
}

// TestBackoffZero: a zero Backoff waits nothing, and the receiver's
// default waits 100 ms at most on the first retry.
func TestBackoffZero(t *testing.T) {
	t.Parallel()
	if d := (Backoff{}).Delay(3); d != 0 {
		t.Errorf("zero Backoff waits %v", d)
	}
	b := Backoff{}.withDefaults(100*time.Millisecond, 10*time.Second, 1)
	for range 100 {
		if d := b.Delay(0); d <= 0 || d > 100*time.Millisecond {
			t.Fatalf("default first wait %v outside (0, 100ms]", d)
		}
	}
}
