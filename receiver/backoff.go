package receiver

import (
	"math/rand/v2"
	"time"
)

// Backoff is an exponential backoff with jitter: wait n (from 0) is
// Initial·2ⁿ capped at Max, reduced by a random fraction of up to Jitter
// (0 < Jitter ≤ 1; 1 is "full jitter"). Its zero fields take the defaults
// of the field that uses it (Config.Backoff, a consumer's
// ReconnectBackoff).
type Backoff struct {
	Initial time.Duration
	Max     time.Duration
	Jitter  float64
}

// withDefaults fills b's zero (or negative) fields with initial, max and
// jitter.
func (b Backoff) withDefaults(initial, max time.Duration, jitter float64) Backoff {
	if b.Initial <= 0 {
		b.Initial = initial
	}
	if b.Max <= 0 {
		b.Max = max
	}
	if b.Jitter <= 0 {
		b.Jitter = jitter
	}
	return b
}

// Delay returns wait n (n >= 0): a value in (base·(1-Jitter), base] where
// base = min(Initial·2ⁿ, max(Max, Initial)). A zero Backoff waits nothing.
func (b Backoff) Delay(n int) time.Duration {
	ceil := max(b.Max, b.Initial)
	d := b.Initial
	for i := 0; i < n && d < ceil; i++ {
		d *= 2
	}
	if d > ceil || d <= 0 {
		d = ceil
	}
	if b.Jitter > 0 && d > 0 {
		d -= time.Duration(rand.Float64() * min(b.Jitter, 1) * float64(d))
	}
	return d
}
