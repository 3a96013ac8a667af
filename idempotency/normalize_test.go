package idempotency_test

import (
	"errors"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/acemq/msgaudit/idempotency"
	"github.com/acemq/msgaudit/internal/claimkit"
)

// TestNormalizeAgreesWithMemory: the backends fill in and check their
// idempotency.Options with claimkit.Normalize, the memory store and Open
// with Options.normalize; both give every setting the same default and
// refuse the same values, so a configuration means the same on every store.
func TestNormalizeAgreesWithMemory(t *testing.T) {
	t.Parallel()
	rapid.Check(t, func(t *rapid.T) {
		o := idempotency.Options{
			ClaimTTL:      time.Duration(rapid.SampledFrom([]int64{0, -1, 1, int64(time.Minute)}).Draw(t, "ttl")),
			Retention:     time.Duration(rapid.SampledFrom([]int64{0, -1, 1, int64(time.Hour)}).Draw(t, "retention")),
			MaxKeyLength:  rapid.SampledFrom([]int{0, -1, 1, 300}).Draw(t, "max"),
			PurgeInterval: time.Duration(rapid.SampledFrom([]int64{0, -1, 1, int64(time.Minute)}).Draw(t, "interval")),
			PurgeBatch:    rapid.SampledFrom([]int{0, -1, 1, 50}).Draw(t, "batch"),
		}
		a, errA := idempotency.Normalize(o)
		b, errB := claimkit.Normalize(o)
		if (errA == nil) != (errB == nil) || errA != nil && (!errors.Is(errA, idempotency.ErrOptions) || errA.Error() != errB.Error()) {
			t.Fatalf("%+v: memory %v, backends %v", o, errA, errB)
		}
		if errA != nil {
			return
		}
		if a.ClaimTTL != b.ClaimTTL || a.Retention != b.Retention || a.MaxKeyLength != b.MaxKeyLength ||
			a.PurgeInterval != b.PurgeInterval || a.PurgeBatch != b.PurgeBatch || a.Clock == nil || b.Clock == nil {
			t.Fatalf("%+v: memory %+v, backends %+v", o, a, b)
		}
	})
}
