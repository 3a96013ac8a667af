package stompconsumer

import (
	"context"
	"math/rand/v2"
	"time"
)

// Backoff is an exponential backoff with jitter: attempt n (from 0) waits
// Initial·2ⁿ capped at Max, then reduced by a random fraction of up to
// Jitter (0 = none, 1 = "full jitter"). Zero fields take the defaults of
// the field that uses it.
type Backoff struct {
	Initial time.Duration
	Max     time.Duration
	Jitter  float64
}

func (b Backoff) withDefaults(initial, max time.Duration, jitter float64) Backoff {
	if b.Initial <= 0 {
		b.Initial = initial
	}
	if b.Max <= 0 {
		b.Max = max
	}
	if b.Max < b.Initial {
		b.Max = b.Initial
	}
	if b.Jitter <= 0 {
		b.Jitter = jitter
	}
	if b.Jitter > 1 {
		b.Jitter = 1
	}
	return b
}

// base returns the un-jittered delay of attempt n: Initial·2ⁿ capped at Max.
func (b Backoff) base(n int) time.Duration {
	d := b.Initial
	for i := 0; i < n && d < b.Max; i++ {
		d *= 2
	}
	if d > b.Max || d <= 0 {
		d = b.Max
	}
	return d
}

// Delay returns the delay before attempt n (n >= 0): a value in
// [base·(1-Jitter), base] where base = min(Initial·2ⁿ, Max).
func (b Backoff) Delay(n int) time.Duration {
	d := b.base(n)
	if b.Jitter > 0 {
		d -= time.Duration(rand.Float64() * b.Jitter * float64(d))
	}
	return d
}

// sleep waits d or until ctx is done; it reports whether the full delay
// elapsed.
func sleep(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
