package idempotency_test

import (
	"context"
	"testing"
	"time"

	"github.com/acemq/msgaudit/idempotency"
	"github.com/acemq/msgaudit/idempotency/storetest"
	"github.com/acemq/msgaudit/internal/testwait"
)

// twoStateStore is a Store whose TryClaim is TryClaimGeneric over the
// memory store's Claim and IsConfirmed: the suite holds the generic path
// to the same contract as the one-step stores.
type twoStateStore struct{ *idempotency.Memory }

func (s twoStateStore) TryClaim(ctx context.Context, k idempotency.Key) (idempotency.Outcome, idempotency.Claim, error) {
	return idempotency.TryClaimGeneric(ctx, s.Memory, k)
}

func TestTryClaimGenericConformance(t *testing.T) {
	t.Parallel()
	storetest.Run(t, func(t *testing.T, o idempotency.Options) idempotency.Store {
		return twoStateStore{idempotency.NewMemory(o)}
	}, storetest.Capabilities{})
}

// between is a TwoState whose Claim, once refused, lets hook act on the
// underlying store before IsConfirmed runs: the races TryClaimGeneric's
// doc comment reasons about, made deterministic.
type between struct {
	*idempotency.Memory
	hook func()
}

func (b between) Claim(ctx context.Context, k idempotency.Key) (idempotency.Claim, bool, error) {
	c, ok, err := b.Memory.Claim(ctx, k)
	if !ok && err == nil && b.hook != nil {
		b.hook()
	}
	return c, ok, err
}

// failing fails whichever call is named.
type failing struct {
	claimErr, confirmedErr error
	claimOK                bool
}

func (f failing) Claim(context.Context, idempotency.Key) (idempotency.Claim, bool, error) {
	return idempotency.Claim{Token: "t"}, f.claimOK, f.claimErr
}

func (f failing) IsConfirmed(context.Context, idempotency.Key) (bool, error) {
	return true, f.confirmedErr
}

func TestTryClaimGenericRaces(t *testing.T) {
	t.Parallel()
	ctx := testwait.Context(t, time.Minute)
	k := idempotency.Key{Namespace: "q", ID: "m1"}
	tests := []struct {
		name string
		// act runs between the refused Claim and IsConfirmed, given the
		// first holder's claim.
		act  func(t *testing.T, m *idempotency.Memory, c idempotency.Claim)
		want idempotency.Outcome
	}{
		{"nothing happens", func(*testing.T, *idempotency.Memory, idempotency.Claim) {}, idempotency.InProgress},
		{"holder confirms in between", func(t *testing.T, m *idempotency.Memory, c idempotency.Claim) {
			if err := m.Confirm(ctx, c); err != nil {
				t.Fatal(err)
			}
		}, idempotency.AlreadyConfirmed},
		{"holder releases in between", func(t *testing.T, m *idempotency.Memory, c idempotency.Claim) {
			if err := m.Release(ctx, c); err != nil {
				t.Fatal(err)
			}
		}, idempotency.InProgress},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			m := idempotency.NewMemory(idempotency.Options{})
			_, c, err := m.TryClaim(ctx, k)
			if err != nil {
				t.Fatal(err)
			}
			b := between{Memory: m, hook: func() { tt.act(t, m, c) }}
			o, got, err := idempotency.TryClaimGeneric(ctx, b, k)
			if err != nil || o != tt.want || got != (idempotency.Claim{}) {
				t.Fatalf("TryClaimGeneric = %v, %+v, %v; want %v", o, got, err, tt.want)
			}
		})
	}
}

func TestTryClaimGenericErrors(t *testing.T) {
	t.Parallel()
	ctx := testwait.Context(t, time.Minute)
	k := idempotency.Key{ID: "m1"}
	boom := context.DeadlineExceeded
	for _, f := range []failing{{claimErr: boom}, {confirmedErr: boom}} {
		o, c, err := idempotency.TryClaimGeneric(ctx, f, k)
		if err != boom || o != 0 || c != (idempotency.Claim{}) {
			t.Fatalf("TryClaimGeneric(%+v) = %v, %+v, %v; want the error and zero values", f, o, c, err)
		}
	}
}
