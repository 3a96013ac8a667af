package claimkit_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/acemq/msgaudit/idempotency"
	"github.com/acemq/msgaudit/idempotency/storetest"
	"github.com/acemq/msgaudit/internal/claimkit"
	"github.com/acemq/msgaudit/internal/testkit/testwait"
)

// memTwoState is a claimkit.TwoState over the memory store: its Claim is
// the store's TryClaim reduced to claimed or not.
type memTwoState struct{ *idempotency.Memory }

func (s memTwoState) Claim(ctx context.Context, k idempotency.Key) (idempotency.Claim, bool, error) {
	o, c, err := s.Memory.TryClaim(ctx, k)
	return c, o == idempotency.Claimed, err
}

// twoStateStore is a Store whose TryClaim is claimkit.TryClaim over a
// two-state claim and IsConfirmed: the suite holds the generic path to the
// same contract as the one-step stores.
type twoStateStore struct{ *idempotency.Memory }

func (s twoStateStore) TryClaim(ctx context.Context, k idempotency.Key) (idempotency.Outcome, idempotency.Claim, error) {
	return claimkit.TryClaim(ctx, memTwoState(s), k)
}

func TestTryClaimConformance(t *testing.T) {
	t.Parallel()
	storetest.Run(t, func(t *testing.T, o idempotency.Options) idempotency.Store {
		return twoStateStore{memStore(t, o)}
	}, storetest.Capabilities{})
}

// between is a TwoState whose Claim, once refused, lets hook act on the
// underlying store before IsConfirmed runs: the races TryClaim's doc
// comment reasons about, made deterministic.
type between struct {
	*idempotency.Memory
	hook func()
}

func (b between) Claim(ctx context.Context, k idempotency.Key) (idempotency.Claim, bool, error) {
	c, ok, err := memTwoState{b.Memory}.Claim(ctx, k)
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

func TestTryClaimRaces(t *testing.T) {
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
			m := memStore(t, idempotency.Options{})
			_, c, err := m.TryClaim(ctx, k)
			if err != nil {
				t.Fatal(err)
			}
			b := between{Memory: m, hook: func() { tt.act(t, m, c) }}
			o, got, err := claimkit.TryClaim(ctx, b, k)
			if err != nil || o != tt.want || got != (idempotency.Claim{}) {
				t.Fatalf("TryClaim = %v, %+v, %v; want %v", o, got, err, tt.want)
			}
		})
	}
}

func TestTryClaimErrors(t *testing.T) {
	t.Parallel()
	ctx := testwait.Context(t, time.Minute)
	k := idempotency.Key{ID: "m1"}
	boom := context.DeadlineExceeded
	for _, f := range []failing{{claimErr: boom}, {confirmedErr: boom}} {
		o, c, err := claimkit.TryClaim(ctx, f, k)
		if err != boom || o != 0 || c != (idempotency.Claim{}) {
			t.Fatalf("TryClaim(%+v) = %v, %+v, %v; want the error and zero values", f, o, c, err)
		}
	}
}

func TestNewToken(t *testing.T) {
	t.Parallel()
	seen := map[string]bool{}
	for range 1000 {
		tok := claimkit.NewToken()
		if len(tok) != 32 || strings.Trim(tok, "0123456789abcdef") != "" {
			t.Fatalf("token %q is not 32 hex digits", tok)
		}
		if seen[tok] {
			t.Fatalf("token %q repeated", tok)
		}
		seen[tok] = true
	}
}

// ExampleTryClaim shows a store written against the two-state contract
// (an atomic Claim and IsConfirmed) getting TryClaim.
func ExampleTryClaim() {
	ctx := context.Background()
	m, err := idempotency.NewMemory(idempotency.Options{})
	if err != nil {
		fmt.Println(err)
		return
	}
	s := memTwoState{m}
	key := idempotency.Key{Namespace: "q", ID: "m1"}

	o, c, _ := claimkit.TryClaim(ctx, s, key)
	fmt.Println(o)
	o, _, _ = claimkit.TryClaim(ctx, s, key)
	fmt.Println(o)
	_ = m.Confirm(ctx, c)
	o, _, _ = claimkit.TryClaim(ctx, s, key)
	fmt.Println(o)
	// Output:
	// claimed
	// in-progress
	// already-confirmed
}

// memStore returns a Memory with options o, failing tb if NewMemory refuses
// them.
func memStore(tb testing.TB, o idempotency.Options) *idempotency.Memory {
	tb.Helper()
	m, err := idempotency.NewMemory(o)
	if err != nil {
		tb.Fatalf("NewMemory(%+v): %v", o, err)
	}
	return m
}
