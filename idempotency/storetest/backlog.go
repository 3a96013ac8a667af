package storetest

import (
	"context"
	"testing"
	"time"

	"github.com/acemq/msgaudit/idempotency"
)

// backlogger is a store that samples its backlog.
type backlogger interface {
	Backlog(ctx context.Context) (idempotency.Backlog, error)
}

// RunBacklog runs the cases of a store's Backlog method against stores
// made by open (see Run; the stores must have a Backlog method). A store
// that reads Options.Clock must count its rows exactly; a ServerTime
// store may estimate them, but must not report fewer than it holds on a
// table this small.
func RunBacklog(t *testing.T, open func(t *testing.T, o idempotency.Options) idempotency.Store, caps Capabilities) {
	if caps.ShortTTL <= 0 {
		caps.ShortTTL = 300 * time.Millisecond
	}
	s := &suite{open: open, caps: caps}
	t.Run("Backlog/HeldAndRows", func(t *testing.T) {
		t.Parallel()
		s.testBacklogHeld(t)
	})
	t.Run("Backlog/ConfirmationAboutToExpire", func(t *testing.T) {
		t.Parallel()
		s.testBacklogForgetting(t)
	})
	if caps.RenewedLooksNew {
		t.Log("Backlog/RenewKeepsAge does not apply to this store: a renewal makes a claim look new (Capabilities.RenewedLooksNew)")
	} else {
		t.Run("Backlog/RenewKeepsAge", func(t *testing.T) {
			t.Parallel()
			s.testBacklogRenew(t)
		})
	}
	t.Run("Backlog/ExpiredClaim", func(t *testing.T) {
		t.Parallel()
		s.testBacklogExpired(t)
	})
}

// backlog samples e's store.
func (e *env) backlog() idempotency.Backlog {
	e.t.Helper()
	b, ok := e.s.(backlogger)
	if !ok {
		e.t.Fatalf("%T has no Backlog method", e.s)
	}
	got, err := b.Backlog(e.ctx)
	if err != nil {
		e.t.Fatalf("Backlog: %v", err)
	}
	e.t.Logf("Backlog = %+v", got)
	return got
}

// wantRows checks b.Rows: exactly n on a store that counts, at least n on
// one that may estimate.
func (e *env) wantRows(b idempotency.Backlog, n int64) {
	e.t.Helper()
	if e.clock != nil && b.Rows != n || b.Rows < n {
		e.t.Fatalf("Backlog.Rows = %d, want %d", b.Rows, n)
	}
}

// testBacklogHeld: an empty store samples as zeros; with two keys claimed
// and one of them confirmed, one claim is held, for at least as long as
// time went by, and both rows are kept; once released, nothing is held.
func (s *suite) testBacklogHeld(t *testing.T) {
	e := s.newEnv(t, longTTL, longRetention)
	if b := e.backlog(); b != (idempotency.Backlog{}) {
		t.Fatalf("empty store: Backlog = %+v, want zeros", b)
	}
	ca := e.tryClaim(e.key("a"), idempotency.Claimed)
	cb := e.tryClaim(e.key("b"), idempotency.Claimed)
	if err := e.s.Confirm(e.ctx, cb); err != nil {
		t.Fatal(err)
	}
	const held = 100 * time.Millisecond
	e.wait(held)
	b := e.backlog()
	if b.Held != 1 {
		t.Fatalf("Backlog.Held = %d, want 1", b.Held)
	}
	if b.OldestHeld < held || b.OldestHeld > longTTL {
		t.Fatalf("Backlog.OldestHeld = %v, want at least %v and at most the claim TTL", b.OldestHeld, held)
	}
	e.wantRows(b, 2)
	if b.OldestRow < b.OldestHeld {
		t.Fatalf("Backlog.OldestRow = %v, younger than the oldest claim (%v)", b.OldestRow, b.OldestHeld)
	}
	if err := e.s.Release(e.ctx, ca); err != nil {
		t.Fatal(err)
	}
	b = e.backlog()
	if b.Held != 0 || b.OldestHeld != 0 {
		t.Fatalf("after the release: Backlog = %+v, want nothing held", b)
	}
	e.wantRows(b, 1)
	if b.OldestRow < held {
		t.Fatalf("Backlog.OldestRow = %v, want at least %v (the confirmation)", b.OldestRow, held)
	}
}

// testBacklogExpired: a claim whose lease ran out is not held any more,
// but its row is kept, and aged, until a purge deletes it.
func (s *suite) testBacklogExpired(t *testing.T) {
	e, unit := s.expiryEnv(t, 1, 100)
	e.tryClaim(e.key("lapsed"), idempotency.Claimed)
	e.wait(unit * 3 / 2)
	b := e.backlog()
	if b.Held != 0 || b.OldestHeld != 0 {
		t.Fatalf("after the lease ran out: Backlog = %+v, want nothing held", b)
	}
	e.wantRows(b, 1)
	if b.OldestRow < unit {
		t.Fatalf("Backlog.OldestRow = %v, want at least %v", b.OldestRow, unit)
	}
}

// testBacklogForgetting: a confirmation whose retention ends sooner than a
// fresh claim's lease is not counted as a held claim.
func (s *suite) testBacklogForgetting(t *testing.T) {
	e, unit := s.expiryEnv(t, 4, 6)
	c := e.tryClaim(e.key("done"), idempotency.Claimed)
	if err := e.s.Confirm(e.ctx, c); err != nil {
		t.Fatal(err)
	}
	e.wait(unit * 3)
	e.tryClaim(e.key("held"), idempotency.Claimed)
	b := e.backlog()
	if b.Held != 1 || b.OldestHeld >= unit {
		t.Fatalf("Backlog = %+v, want the one fresh claim held (the confirmation is not a claim)", b)
	}
	e.wantRows(b, 2)
	if b.OldestRow < unit*3 {
		t.Fatalf("Backlog.OldestRow = %v, want at least %v (the confirmation)", b.OldestRow, unit*3)
	}
}

// testBacklogRenew: a renewal does not make a claim younger: OldestHeld
// keeps counting from when it was taken, so a handler that never ends
// shows even while its claim is renewed.
func (s *suite) testBacklogRenew(t *testing.T) {
	e, unit := s.expiryEnv(t, 2, 100)
	c := e.tryClaim(e.key("renewed"), idempotency.Claimed)
	for range 3 {
		e.wait(unit)
		var err error
		if c, err = e.s.Renew(e.ctx, c); err != nil {
			t.Fatalf("Renew: %v", err)
		}
	}
	b := e.backlog()
	if b.Held != 1 || b.OldestHeld < 3*unit {
		t.Fatalf("Backlog = %+v, want one claim held for at least %v", b, 3*unit)
	}
}
