// Package storetest is the conformance suite every idempotency.Store
// backend runs: one set of cases, so memory, SQLite, Redis, PostgreSQL and
// MySQL are held to exactly the same contract.
//
// A backend's test calls Run with a function opening a fresh store (on its
// own file, key prefix or table, cleaned up through t.Cleanup) and the
// Capabilities saying how the backend keeps time, how to reopen it and
// how to point it at a dead server. A store that implements
// idempotency.BatchStore is also held to the batch contract (the cases
// named "Batch/..."; RunBatch runs them alone): every per-key answer of a
// batch call equals what the single-key calls would have answered in
// slice order, and a failed batch fails as a whole.
package storetest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/acemq/msgaudit/idempotency"
	"github.com/acemq/msgaudit/internal/claimkit"
	"github.com/acemq/msgaudit/internal/testkit/testwait"
)

// Capabilities describe a backend to the suite.
type Capabilities struct {
	// ServerTime is true for stores whose server keeps time (Redis PX,
	// PostgreSQL now()) and ignore Options.Clock. Their expiry cases use
	// ShortTTL and real sleeps; the model-based case, which needs exact
	// time, is skipped. False means the store reads Options.Clock: the
	// suite injects a FakeClock and moves it instead of sleeping.
	ServerTime bool
	// ShortTTL is the claim TTL (and the unit of retention) the expiry
	// cases use on a ServerTime store; zero means 300ms. Sleeps are
	// fractions and small multiples of it.
	ShortTTL time.Duration
	// Reopen returns a new store object on the same storage as old (the
	// same file; the same server, prefix or table), opened with o. The
	// suite has closed old. Nil leaves the restart case out.
	Reopen func(t *testing.T, old idempotency.Store, o idempotency.Options) idempotency.Store
	// Unreachable returns a store whose server does not answer (for
	// example a closed port on 127.0.0.1). Nil leaves the fault case out, as for
	// the memory store, which has no server.
	Unreachable func(t *testing.T, o idempotency.Options) idempotency.Store
	// RenewedLooksNew is true for a store whose Backlog derives a claim's
	// age from its expiry (mysqlstore keeps no write time), so a renewal
	// makes the claim look just taken. False holds Backlog.OldestHeld to
	// the time since the claim was taken, renewals or not (RunBacklog).
	RenewedLooksNew bool
}

// Long TTLs for the cases that must not see anything expire.
const (
	longTTL       = time.Minute
	longRetention = time.Hour
)

// caseDeadline ends the context of a case's store calls, and waitDeadline
// bounds each wait for the case's goroutines: a store that hangs fails the
// case, naming the call or the goroutines, instead of hanging the package.
// Both are limits for slow, shared machines, not expectations.
const (
	caseDeadline = 3 * time.Minute
	waitDeadline = 2 * time.Minute
)

// Run runs the conformance suite against stores made by open. open must
// return a new, empty (or at least isolated) store per call and arrange
// its cleanup with t.Cleanup; the suite closes stores itself too, so
// Close must tolerate a second call.
//
// When the stores implement idempotency.BatchStore (Run opens one store
// to see), Run also runs the batch cases, named "Batch/...": the ones
// RunBatch runs.
func Run(t *testing.T, open func(t *testing.T, o idempotency.Options) idempotency.Store, caps Capabilities) {
	if caps.ShortTTL <= 0 {
		caps.ShortTTL = 300 * time.Millisecond
	}
	s := &suite{open: open, caps: caps}
	// The race case runs alone: it is the one that loads the machine.
	t.Run("Race/OneWinnerPerKey", s.testRace)
	// A case a store cannot have (a restart of the memory store, the
	// unreachable server of a store without one) is not run at all, rather
	// than skipped: the project's test command fails on any skip, so a
	// skipped test would hide a missing service.
	for _, c := range []struct {
		name string
		fn   func(*testing.T)
		na   string // non-empty: why the case does not apply
	}{
		{"ConfirmThenDuplicate", s.testConfirm, ""},
		{"ReleaseThenClaim", s.testRelease, ""},
		{"ForeignTokens", s.testForeignTokens, ""},
		{"Expiry/TakeOver", s.testTakeOver, ""},
		{"Expiry/LapsedHolder", s.testLapsedHolder, ""},
		{"Expiry/RenewExtends", s.testRenew, ""},
		{"Expiry/RetentionForgets", s.testRetention, ""},
		{"Expiry/RaceOnExpired", s.testRaceOnExpired, ""},
		{"Restart", s.testRestart, notIf(caps.Reopen == nil, "it keeps nothing across a restart (Capabilities.Reopen is nil)")},
		{"Keys/Invalid", s.testInvalidKey, ""},
		{"Keys/LongAndOdd", s.testLongKeys, ""},
		{"Context/Cancelled", s.testCancelled, ""},
		{"Fault/Unreachable", s.testUnreachable, notIf(caps.Unreachable == nil, "it has no server (Capabilities.Unreachable is nil)")},
		{"Closed", s.testClosed, ""},
		{"ConsumerRule", s.testConsumerRule, ""},
		{"Model", s.testModel, notIf(caps.ServerTime, "it keeps server time and the model needs an injected clock")},
	} {
		if c.na != "" {
			t.Logf("%s does not apply to this store: %s", c.name, c.na)
			continue
		}
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			c.fn(t)
		})
	}
	if s.isBatchStore(t) {
		s.runBatch(t)
	} else {
		t.Log("the batch cases do not apply to this store: it does not implement idempotency.BatchStore")
	}
}

// notIf returns why when cond holds, else "".
func notIf(cond bool, why string) string {
	if cond {
		return why
	}
	return ""
}

type suite struct {
	open func(t *testing.T, o idempotency.Options) idempotency.Store
	caps Capabilities
}

// env is one case's store, clock and namespace.
type env struct {
	t     *testing.T
	s     idempotency.Store
	o     idempotency.Options
	clock *FakeClock // nil for ServerTime stores
	ns    string
	ctx   context.Context
}

// newEnv opens a store with the given TTL and retention. For a store that
// reads the clock they are used as given (with a FakeClock); for a
// ServerTime store they are expressed in units of ShortTTL by the caller.
func (s *suite) newEnv(t *testing.T, ttl, retention time.Duration) *env {
	t.Helper()
	e := &env{t: t, ns: "storetest-" + randHex(6), ctx: testwait.Context(t, caseDeadline)}
	e.o = idempotency.Options{ClaimTTL: ttl, Retention: retention}
	if !s.caps.ServerTime {
		e.clock = NewFakeClock(time.Date(2030, 1, 2, 3, 4, 5, 6, time.UTC))
		e.o.Clock = e.clock
	}
	e.s = s.open(t, e.o)
	t.Cleanup(func() { _ = e.s.Close() })
	return e
}

// expiryEnv opens a store for an expiry case: claim TTL ttl (a FakeClock
// store) or ShortTTL scaled by the same ratio (a ServerTime store), and
// retention ret likewise. It returns the env and the unit by which the
// case scales its waits.
func (s *suite) expiryEnv(t *testing.T, ttlUnits, retUnits int) (*env, time.Duration) {
	unit := time.Minute
	if s.caps.ServerTime {
		unit = s.caps.ShortTTL
	}
	return s.newEnv(t, time.Duration(ttlUnits)*unit, time.Duration(retUnits)*unit), unit
}

// wait lets d pass: moves the fake clock, or sleeps on a ServerTime store.
func (e *env) wait(d time.Duration) {
	if e.clock != nil {
		e.clock.Advance(d)
		return
	}
	time.Sleep(d)
}

func (e *env) key(id string) idempotency.Key { return idempotency.Key{Namespace: e.ns, ID: id} }

// tryClaim calls TryClaim and fails the test on an error or an outcome
// other than want. It returns the claim.
func (e *env) tryClaim(k idempotency.Key, want idempotency.Outcome) idempotency.Claim {
	e.t.Helper()
	start := time.Now()
	o, c, err := e.s.TryClaim(e.ctx, k)
	if err != nil {
		e.t.Fatalf("TryClaim(%.40q): %v", k.ID, err)
	}
	if o != want {
		e.t.Fatalf("TryClaim(%.40q) = %v, want %v", k.ID, o, want)
	}
	if want == idempotency.Claimed {
		e.checkClaim(c, k, start)
	} else if c != (idempotency.Claim{}) {
		e.t.Fatalf("TryClaim(%.40q) = %v with a non-zero claim %+v", k.ID, o, c)
	}
	return c
}

// checkClaim checks the fields of a fresh or renewed claim.
func (e *env) checkClaim(c idempotency.Claim, k idempotency.Key, start time.Time) {
	e.t.Helper()
	if c.Key != k {
		e.t.Fatalf("claim key = %.40q, want %.40q", c.Key, k)
	}
	if c.Token == "" {
		e.t.Fatal("claim has an empty token")
	}
	if e.clock != nil {
		if want := e.clock.Now().Add(e.o.ClaimTTL); !c.Expires.Equal(want) {
			e.t.Fatalf("claim expires %v, want now+ClaimTTL = %v", c.Expires, want)
		}
	} else if !c.Expires.After(start) {
		e.t.Fatalf("claim expires %v, not after the call started (%v)", c.Expires, start)
	}
}

func (e *env) isConfirmed(k idempotency.Key, want bool) {
	e.t.Helper()
	got, err := e.s.IsConfirmed(e.ctx, k)
	if err != nil {
		e.t.Fatalf("IsConfirmed(%.40q): %v", k.ID, err)
	}
	if got != want {
		e.t.Fatalf("IsConfirmed(%.40q) = %v, want %v", k.ID, got, want)
	}
}

// expectErr fails unless err matches want (nil meaning success).
func expectErr(t *testing.T, what string, err, want error) {
	t.Helper()
	if want == nil && err != nil || want != nil && !errors.Is(err, want) {
		t.Fatalf("%s: error %v, want %v", what, err, want)
	}
}

func randHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// testRace: 32 goroutines race on each of 1000 keys; exactly one wins
// each key, all others see InProgress. Keys go in
// batches of 50 so the goroutines meet on the same key at the same time.
func (s *suite) testRace(t *testing.T) {
	const (
		keys       = 1000
		goroutines = 32
		batch      = 50
	)
	e := s.newEnv(t, longTTL, longRetention)
	winners := make([]atomic.Int32, keys)
	claims := make([]idempotency.Claim, keys)
	var failed atomic.Bool
	for lo := 0; lo < keys; lo += batch {
		var start, done sync.WaitGroup
		start.Add(1)
		for range goroutines {
			done.Add(1)
			go func() {
				defer done.Done()
				start.Wait()
				for i := lo; i < lo+batch; i++ {
					k := e.key("race-" + itoa(i))
					o, c, err := e.s.TryClaim(e.ctx, k)
					won := o == idempotency.Claimed
					if err == nil && !won && o != idempotency.InProgress {
						t.Errorf("key %d: TryClaim = %v, want claimed or in-progress", i, o)
						failed.Store(true)
					}
					if err != nil {
						t.Errorf("key %d: %v", i, err)
						failed.Store(true)
						return
					}
					if won {
						if winners[i].Add(1) == 1 {
							claims[i] = c
						}
					}
				}
			}()
		}
		start.Done()
		testwait.Group(t, &done, waitDeadline, "the end of the "+itoa(goroutines)+" goroutines racing on keys "+itoa(lo)+" to "+itoa(lo+batch-1))
		if failed.Load() {
			t.FailNow()
		}
		for i := lo; i < lo+batch; i++ {
			if n := winners[i].Load(); n != 1 {
				t.Fatalf("key %d: %d winners, want exactly 1", i, n)
			}
		}
		// The winners' claims are real: each confirms, then the key is a
		// duplicate. They confirm after their own round, not after the
		// whole race, which on a slow store may outlast their lease.
		for i := lo; i < lo+batch; i += 10 {
			expectErr(t, "Confirm winner", e.s.Confirm(e.ctx, claims[i]), nil)
			e.tryClaim(e.key("race-"+itoa(i)), idempotency.AlreadyConfirmed)
		}
	}
}

func itoa(i int) string {
	var b [20]byte
	n := len(b)
	for {
		n--
		b[n] = byte('0' + i%10)
		i /= 10
		if i == 0 {
			return string(b[n:])
		}
	}
}

// testConfirm: claim → in progress for everyone else → confirm →
// duplicate; a confirmed key cannot be confirmed, released or renewed.
func (s *suite) testConfirm(t *testing.T) {
	e := s.newEnv(t, longTTL, longRetention)
	k := e.key("m1")
	c := e.tryClaim(k, idempotency.Claimed)
	e.isConfirmed(k, false)
	e.tryClaim(k, idempotency.InProgress)
	expectErr(t, "Confirm", e.s.Confirm(e.ctx, c), nil)
	e.isConfirmed(k, true)
	e.tryClaim(k, idempotency.AlreadyConfirmed)
	expectErr(t, "second Confirm", e.s.Confirm(e.ctx, c), idempotency.ErrClaimLost)
	expectErr(t, "Release after Confirm", e.s.Release(e.ctx, c), idempotency.ErrClaimLost)
	if _, err := e.s.Renew(e.ctx, c); !errors.Is(err, idempotency.ErrClaimLost) {
		t.Fatalf("Renew after Confirm: %v, want ErrClaimLost", err)
	}
	e.isConfirmed(k, true)
	e.tryClaim(k, idempotency.AlreadyConfirmed)
	// Another key is untouched.
	e.isConfirmed(e.key("m2"), false)
	e.tryClaim(e.key("m2"), idempotency.Claimed)
}

// testRelease: a released key can be claimed again, with a new token; the
// old token is then worthless.
func (s *suite) testRelease(t *testing.T) {
	e := s.newEnv(t, longTTL, longRetention)
	k := e.key("m1")
	c1 := e.tryClaim(k, idempotency.Claimed)
	expectErr(t, "Release", e.s.Release(e.ctx, c1), nil)
	e.isConfirmed(k, false)
	expectErr(t, "second Release", e.s.Release(e.ctx, c1), idempotency.ErrClaimLost)
	c2 := e.tryClaim(k, idempotency.Claimed)
	if c2.Token == c1.Token {
		t.Fatalf("a new claim reused token %q", c1.Token)
	}
	expectErr(t, "old Confirm", e.s.Confirm(e.ctx, c1), idempotency.ErrClaimLost)
	expectErr(t, "old Release", e.s.Release(e.ctx, c1), idempotency.ErrClaimLost)
	if _, err := e.s.Renew(e.ctx, c1); !errors.Is(err, idempotency.ErrClaimLost) {
		t.Fatalf("old Renew: %v, want ErrClaimLost", err)
	}
	e.tryClaim(k, idempotency.InProgress)
	expectErr(t, "new Confirm", e.s.Confirm(e.ctx, c2), nil)
	e.tryClaim(k, idempotency.AlreadyConfirmed)
}

// testForeignTokens: tokens that never held the key (forged, empty, or
// another key's) change nothing.
func (s *suite) testForeignTokens(t *testing.T) {
	e := s.newEnv(t, longTTL, longRetention)
	a, b, never := e.key("a"), e.key("b"), e.key("never")
	ca := e.tryClaim(a, idempotency.Claimed)
	cb := e.tryClaim(b, idempotency.Claimed)
	for _, f := range []struct {
		name string
		c    idempotency.Claim
	}{
		{"forged token", idempotency.Claim{Key: a, Token: claimkit.NewToken(), Expires: ca.Expires}},
		{"empty token", idempotency.Claim{Key: a, Expires: ca.Expires}},
		{"another key's token", idempotency.Claim{Key: a, Token: cb.Token, Expires: ca.Expires}},
		{"never claimed key", idempotency.Claim{Key: never, Token: ca.Token, Expires: ca.Expires}},
	} {
		expectErr(t, f.name+": Confirm", e.s.Confirm(e.ctx, f.c), idempotency.ErrClaimLost)
		expectErr(t, f.name+": Release", e.s.Release(e.ctx, f.c), idempotency.ErrClaimLost)
		if _, err := e.s.Renew(e.ctx, f.c); !errors.Is(err, idempotency.ErrClaimLost) {
			t.Fatalf("%s: Renew: %v, want ErrClaimLost", f.name, err)
		}
	}
	e.isConfirmed(a, false)
	e.isConfirmed(never, false)
	e.tryClaim(a, idempotency.InProgress)
	e.tryClaim(b, idempotency.InProgress)
	expectErr(t, "Confirm a", e.s.Confirm(e.ctx, ca), nil)
	expectErr(t, "Release b", e.s.Release(e.ctx, cb), nil)
	e.tryClaim(never, idempotency.Claimed)
}

// testTakeOver: an expired claim is taken over; the old holder's confirm,
// release and renew get ErrClaimLost and leave the new claim intact.
func (s *suite) testTakeOver(t *testing.T) {
	e, unit := s.expiryEnv(t, 1, 100)
	k := e.key("m1")
	old := e.tryClaim(k, idempotency.Claimed)
	e.wait(unit + unit/4)
	e.isConfirmed(k, false)
	cur := e.tryClaim(k, idempotency.Claimed)
	if cur.Token == old.Token {
		t.Fatalf("take-over reused token %q", old.Token)
	}
	expectErr(t, "old Confirm", e.s.Confirm(e.ctx, old), idempotency.ErrClaimLost)
	expectErr(t, "old Release", e.s.Release(e.ctx, old), idempotency.ErrClaimLost)
	if _, err := e.s.Renew(e.ctx, old); !errors.Is(err, idempotency.ErrClaimLost) {
		t.Fatalf("old Renew: %v, want ErrClaimLost", err)
	}
	e.isConfirmed(k, false)
	e.tryClaim(k, idempotency.InProgress)
	expectErr(t, "new Confirm", e.s.Confirm(e.ctx, cur), nil)
	e.tryClaim(k, idempotency.AlreadyConfirmed)
}

// testLapsedHolder: a holder whose lease lapsed has lost the claim even if
// nobody took it over: confirming then would race a take-over.
func (s *suite) testLapsedHolder(t *testing.T) {
	e, unit := s.expiryEnv(t, 1, 100)
	k1, k2 := e.key("m1"), e.key("m2")
	c1 := e.tryClaim(k1, idempotency.Claimed)
	c2 := e.tryClaim(k2, idempotency.Claimed)
	e.wait(unit + unit/4)
	expectErr(t, "lapsed Confirm", e.s.Confirm(e.ctx, c1), idempotency.ErrClaimLost)
	expectErr(t, "lapsed Release", e.s.Release(e.ctx, c2), idempotency.ErrClaimLost)
	e.isConfirmed(k1, false)
	e.tryClaim(k1, idempotency.Claimed)
	e.tryClaim(k2, idempotency.Claimed)
}

// testRenew: a renewed claim outlives its original expiry, then lapses
// one TTL after the renewal.
func (s *suite) testRenew(t *testing.T) {
	e, unit := s.expiryEnv(t, 1, 100)
	k := e.key("m1")
	c := e.tryClaim(k, idempotency.Claimed)
	e.wait(unit / 2)
	start := time.Now()
	r, err := e.s.Renew(e.ctx, c)
	if err != nil {
		t.Fatalf("Renew: %v", err)
	}
	e.checkClaim(r, k, start)
	if r.Token != c.Token || !r.Expires.After(c.Expires) {
		t.Fatalf("Renew = %+v, want the same token expiring after %v", r, c.Expires)
	}
	e.wait(unit * 3 / 5) // past the original expiry, within the renewed one
	e.tryClaim(k, idempotency.InProgress)
	if e.clock != nil {
		// The renewal extended by one TTL from the renewal, not forever:
		// at exactly renewal + TTL the lease is over.
		e.wait(unit * 2 / 5)
		e.tryClaim(k, idempotency.Claimed)
		expectErr(t, "Confirm after renewed lease lapsed", e.s.Confirm(e.ctx, r), idempotency.ErrClaimLost)
		return
	}
	// Either the original or the renewed claim value works: same token.
	expectErr(t, "Confirm renewed", e.s.Confirm(e.ctx, c), nil)
	e.tryClaim(k, idempotency.AlreadyConfirmed)
}

// testRetention: a confirmation outlives the claim TTL and is forgotten
// after the retention period: the key can be claimed again.
func (s *suite) testRetention(t *testing.T) {
	e, unit := s.expiryEnv(t, 1, 2)
	k := e.key("m1")
	c := e.tryClaim(k, idempotency.Claimed)
	expectErr(t, "Confirm", e.s.Confirm(e.ctx, c), nil)
	e.wait(unit + unit/4) // past the claim TTL, within retention
	e.isConfirmed(k, true)
	e.tryClaim(k, idempotency.AlreadyConfirmed)
	e.wait(unit) // past retention
	e.isConfirmed(k, false)
	e.tryClaim(k, idempotency.Claimed)
}

// testRaceOnExpired: goroutines race to take over each of several expired
// claims. None gets an error or AlreadyConfirmed; exactly one gets Claimed
// on a store that reads the clock (the fake clock stands still, so the
// winner's lease cannot lapse during the race). On a ServerTime store the
// winner's short lease may lapse before a late racer arrives, which may
// then take it over once more, so only at least one winner is required
// there (Race/OneWinnerPerKey holds the long-lease case to exactly one).
func (s *suite) testRaceOnExpired(t *testing.T) {
	const (
		keys   = 20
		racers = 16
	)
	e, unit := s.expiryEnv(t, 1, 100)
	for i := range keys {
		e.tryClaim(e.key("expired-"+itoa(i)), idempotency.Claimed)
	}
	e.wait(unit + unit/4)
	for i := range keys {
		k := e.key("expired-" + itoa(i))
		var (
			start, done sync.WaitGroup
			won         atomic.Int32
		)
		start.Add(1)
		for range racers {
			done.Add(1)
			go func() {
				defer done.Done()
				start.Wait()
				o, _, err := e.s.TryClaim(e.ctx, k)
				switch {
				case err != nil:
					t.Errorf("key %d: TryClaim: %v", i, err)
				case o == idempotency.Claimed:
					won.Add(1)
				case o != idempotency.InProgress:
					t.Errorf("key %d: TryClaim on an expired claim = %v, want claimed or in-progress", i, o)
				}
			}()
		}
		start.Done()
		testwait.Group(t, &done, waitDeadline, "the end of the "+itoa(racers)+" goroutines racing on expired key "+itoa(i))
		switch n := won.Load(); {
		case e.clock != nil && n != 1:
			t.Fatalf("key %d: %d winners of the take-over, want exactly 1", i, n)
		case n < 1:
			t.Fatalf("key %d: no winner of the take-over, want at least 1", i)
		}
	}
}

// testRestart: a new store object on the same storage sees what the old
// one wrote, and the old claim tokens stay valid.
func (s *suite) testRestart(t *testing.T) {
	e := s.newEnv(t, longTTL, longRetention)
	done, held, fresh := e.key("done"), e.key("held"), e.key("fresh")
	c := e.tryClaim(done, idempotency.Claimed)
	expectErr(t, "Confirm", e.s.Confirm(e.ctx, c), nil)
	h := e.tryClaim(held, idempotency.Claimed)
	expectErr(t, "Close", e.s.Close(), nil)

	e.s = s.caps.Reopen(t, e.s, e.o)
	t.Cleanup(func() { _ = e.s.Close() })
	e.isConfirmed(done, true)
	e.tryClaim(done, idempotency.AlreadyConfirmed)
	e.tryClaim(held, idempotency.InProgress)
	expectErr(t, "Confirm across restart", e.s.Confirm(e.ctx, h), nil)
	e.tryClaim(held, idempotency.AlreadyConfirmed)
	e.tryClaim(fresh, idempotency.Claimed)
}

// testInvalidKey: an empty id is ErrInvalidKey for every operation; an
// empty namespace is a namespace like any other.
func (s *suite) testInvalidKey(t *testing.T) {
	e := s.newEnv(t, longTTL, longRetention)
	for _, k := range []idempotency.Key{{}, {Namespace: e.ns}} {
		o, c, err := e.s.TryClaim(e.ctx, k)
		if !errors.Is(err, idempotency.ErrInvalidKey) || o != 0 || c != (idempotency.Claim{}) {
			t.Fatalf("TryClaim(%q) = %v, %+v, %v; want ErrInvalidKey and zero values", k, o, c, err)
		}
		if ok, err := e.s.IsConfirmed(e.ctx, k); !errors.Is(err, idempotency.ErrInvalidKey) || ok {
			t.Fatalf("IsConfirmed(%q) = %v, %v; want ErrInvalidKey", k, ok, err)
		}
		bad := idempotency.Claim{Key: k, Token: claimkit.NewToken()}
		expectErr(t, "Confirm", e.s.Confirm(e.ctx, bad), idempotency.ErrInvalidKey)
		expectErr(t, "Release", e.s.Release(e.ctx, bad), idempotency.ErrInvalidKey)
		if _, err := e.s.Renew(e.ctx, bad); !errors.Is(err, idempotency.ErrInvalidKey) {
			t.Fatalf("Renew(%q): %v, want ErrInvalidKey", k, err)
		}
	}
	// The empty namespace works. It is shared by every user of the store,
	// so use a random id.
	id := "storetest-empty-ns-" + randHex(8)
	c := e.tryClaim(idempotency.Key{ID: id}, idempotency.Claimed)
	e.tryClaim(e.key(id), idempotency.Claimed) // a different namespace, a different key
	expectErr(t, "Release", e.s.Release(e.ctx, c), nil)
}

// testLongKeys: keys far longer than any index (hashed, never truncated),
// keys differing only past a long shared prefix, bytes PostgreSQL text
// cannot hold, keys differing only in case, a trailing space or the
// encoding of an accent (compared byte for byte, never under a collation),
// and namespace/id splits that a naive join would merge.
func (s *suite) testLongKeys(t *testing.T) {
	e := s.newEnv(t, longTTL, longRetention)
	long := strings.Repeat("x", 10<<10)
	keys := []idempotency.Key{
		e.key(long + "1"),
		e.key(long + "2"),
		e.key("1" + long),
		{Namespace: e.ns + long, ID: "1"},
		{Namespace: e.ns + long[:1], ID: long[1:] + "1"},
		e.key(strings.Repeat("y", claimkit.DefaultMaxKeyLength-len(e.ns)-1)),
		e.key(strings.Repeat("y", claimkit.DefaultMaxKeyLength-len(e.ns))),
		e.key("nul\x00byte"),
		e.key("nul"),
		e.key("bad-utf8-\xff\xfe"),
		e.key("bad-utf8-"),
		e.key("ünïcödé-✓"),
		// Keys a case-, space- or accent-insensitive collation would take
		// for one.
		e.key("key"),
		e.key("Key"),
		e.key("KEY"),
		e.key("key "),
		e.key("kéy"),
		e.key("ke\u0301y"),
		{Namespace: e.ns + "/a", ID: "b"},
		{Namespace: e.ns, ID: "a/b"},
		{Namespace: e.ns + "%2Fa", ID: "b"},
		{Namespace: e.ns + "/", ID: "a/b"},
		e.key(claimkit.HashedKeyPrefix + strings.Repeat("0", 64)),
	}
	claims := make([]idempotency.Claim, len(keys))
	for i, k := range keys {
		claims[i] = e.tryClaim(k, idempotency.Claimed)
	}
	for i, k := range keys {
		e.tryClaim(k, idempotency.InProgress)
		if i%2 == 0 {
			expectErr(t, "Confirm", e.s.Confirm(e.ctx, claims[i]), nil)
		}
	}
	for i, k := range keys {
		e.isConfirmed(k, i%2 == 0)
		if i%2 == 0 {
			e.tryClaim(k, idempotency.AlreadyConfirmed)
		} else {
			e.tryClaim(k, idempotency.InProgress)
			expectErr(t, "Release", e.s.Release(e.ctx, claims[i]), nil)
		}
	}
}

// testCancelled: a cancelled or expired context returns its error and
// changes nothing.
func (s *suite) testCancelled(t *testing.T) {
	e := s.newEnv(t, longTTL, longRetention)
	held, free := e.key("held"), e.key("free")
	c := e.tryClaim(held, idempotency.Claimed)

	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	expired, cancel2 := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
	defer cancel2()
	for _, ctx := range []context.Context{cancelled, expired} {
		want := ctx.Err()
		o, cl, err := e.s.TryClaim(ctx, free)
		if !errors.Is(err, want) || o != 0 || cl != (idempotency.Claim{}) {
			t.Fatalf("TryClaim = %v, %+v, %v; want %v and zero values", o, cl, err, want)
		}
		if ok, err := e.s.IsConfirmed(ctx, held); !errors.Is(err, want) || ok {
			t.Fatalf("IsConfirmed = %v, %v; want %v", ok, err, want)
		}
		expectErr(t, "Confirm", e.s.Confirm(ctx, c), want)
		expectErr(t, "Release", e.s.Release(ctx, c), want)
		if _, err := e.s.Renew(ctx, c); !errors.Is(err, want) {
			t.Fatalf("Renew: %v, want %v", err, want)
		}
	}
	// Nothing changed: held is still held (not confirmed, not released),
	// free is still free.
	e.isConfirmed(held, false)
	e.tryClaim(held, idempotency.InProgress)
	e.tryClaim(free, idempotency.Claimed)
	expectErr(t, "Confirm", e.s.Confirm(e.ctx, c), nil)
}

// testUnreachable: with the server gone every operation is an error —
// never a verdict, never ErrClaimLost.
func (s *suite) testUnreachable(t *testing.T) {
	o := idempotency.Options{ClaimTTL: longTTL, Retention: longRetention}
	st := s.caps.Unreachable(t, o)
	t.Cleanup(func() { _ = st.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	k := idempotency.Key{Namespace: "storetest-" + randHex(6), ID: "m1"}
	c := idempotency.Claim{Key: k, Token: claimkit.NewToken(), Expires: time.Now().Add(time.Minute)}
	notVerdict := func(op string, err error) {
		t.Helper()
		if err == nil {
			t.Fatalf("%s on an unreachable server: nil error", op)
		}
		if errors.Is(err, idempotency.ErrClaimLost) || errors.Is(err, idempotency.ErrInvalidKey) {
			t.Fatalf("%s on an unreachable server: %v, a verdict instead of a backend error", op, err)
		}
	}
	out, cl, err := st.TryClaim(ctx, k)
	notVerdict("TryClaim", err)
	if out != 0 || cl != (idempotency.Claim{}) {
		t.Fatalf("TryClaim on an unreachable server = %v, %+v; want zero values", out, cl)
	}
	confirmed, err := st.IsConfirmed(ctx, k)
	notVerdict("IsConfirmed", err)
	if confirmed {
		t.Fatal("IsConfirmed on an unreachable server reported true")
	}
	notVerdict("Confirm", st.Confirm(ctx, c))
	notVerdict("Release", st.Release(ctx, c))
	_, err = st.Renew(ctx, c)
	notVerdict("Renew", err)
}

// testClosed: a closed store refuses work with ErrClosed; a second Close
// is harmless.
func (s *suite) testClosed(t *testing.T) {
	e := s.newEnv(t, longTTL, longRetention)
	k := e.key("m1")
	c := e.tryClaim(k, idempotency.Claimed)
	expectErr(t, "Close", e.s.Close(), nil)
	if o, _, err := e.s.TryClaim(e.ctx, e.key("m2")); !errors.Is(err, idempotency.ErrClosed) || o != 0 {
		t.Fatalf("TryClaim after Close = %v, %v; want ErrClosed", o, err)
	}
	expectErr(t, "Confirm after Close", e.s.Confirm(e.ctx, c), idempotency.ErrClosed)
	_ = e.s.Close()
}

// testConsumerRule runs the consumer rule end to end: 8 workers each
// receive every one of 200 messages, in their own order, and keep
// redelivering a message until it is acknowledged. A handler fails (then
// releases) a third of the time. Every message must run to success exactly
// once and be acknowledged only as Claimed-and-confirmed or
// AlreadyConfirmed.
func (s *suite) testConsumerRule(t *testing.T) {
	const (
		msgs    = 200
		workers = 8
	)
	e := s.newEnv(t, longTTL, longRetention)
	var succeeded [msgs]atomic.Int32
	var wg sync.WaitGroup
	// A worker redelivers until its deadline, not for a number of rounds: a
	// worker that only sees InProgress (another holds the claim) spins
	// through rounds fast, so a round count ran out whenever the holder was
	// descheduled.
	deadline := time.Now().Add(waitDeadline)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			pending := make([]int, msgs)
			for i := range pending {
				pending[i] = (i*7 + w*31) % msgs // a per-worker order
			}
			rnd := uint32(w + 1)
			for len(pending) > 0 {
				if time.Now().After(deadline) {
					t.Errorf("worker %d: %d messages not acknowledged within %v", w, len(pending), waitDeadline)
					return
				}
				var requeue []int
				for _, m := range pending {
					k := e.key("msg-" + itoa(m))
					o, c, err := e.s.TryClaim(e.ctx, k)
					if err != nil {
						t.Errorf("TryClaim: %v", err)
						return
					}
					switch o {
					case idempotency.AlreadyConfirmed: // duplicate: acknowledge
					case idempotency.InProgress: // unknown: hand back
						requeue = append(requeue, m)
					case idempotency.Claimed:
						rnd = rnd*1664525 + 1013904223
						if rnd>>30 == 0 { // the handler failed: release, redeliver
							if err := e.s.Release(e.ctx, c); err != nil {
								t.Errorf("Release: %v", err)
								return
							}
							requeue = append(requeue, m)
							continue
						}
						succeeded[m].Add(1)
						if err := e.s.Confirm(e.ctx, c); err != nil {
							t.Errorf("Confirm: %v", err)
							return
						}
					default:
						t.Errorf("TryClaim outcome %v", o)
						return
					}
				}
				pending = requeue
				runtime.Gosched() // let the holders of the claims in requeue finish
			}
		}()
	}
	testwait.Group(t, &wg, waitDeadline+testwait.Long, "the end of the "+itoa(workers)+" consuming workers")
	for m := range msgs {
		if n := succeeded[m].Load(); n != 1 {
			t.Fatalf("message %d ran to success %d times, want exactly once", m, n)
		}
		e.isConfirmed(e.key("msg-"+itoa(m)), true)
	}
}

// testModel drives the store with random operation sequences on a few
// keys, with the fake clock moving in steps that land before, on and
// after expiry boundaries, and checks every answer against a reference
// model kept in a map. Needs exact time, so not for ServerTime stores.
func (s *suite) testModel(t *testing.T) {
	const (
		ttl = 10 * time.Second
		ret = 60 * time.Second
	)
	e := s.newEnv(t, ttl, ret)
	type entry struct {
		confirmed bool
		owner     string
		expires   time.Time
	}
	steps := []time.Duration{time.Nanosecond, time.Second, ttl - time.Nanosecond, ttl, ret / 2, ret}
	rapid.Check(t, func(rt *rapid.T) {
		ns := "model-" + randHex(6)
		keys := []idempotency.Key{{Namespace: ns, ID: "a"}, {Namespace: ns, ID: "b"}, {Namespace: ns, ID: "c"}}
		model := map[idempotency.Key]entry{}
		var claims []idempotency.Claim // every claim handed out, stale ones too
		ctx := e.ctx
		live := func(k idempotency.Key) (entry, bool) {
			en, ok := model[k]
			return en, ok && en.expires.After(e.clock.Now())
		}
		held := func(c idempotency.Claim) bool {
			en, ok := live(c.Key)
			return ok && !en.confirmed && en.owner == c.Token
		}
		pickClaim := func() (idempotency.Claim, bool) {
			if len(claims) == 0 {
				return idempotency.Claim{}, false
			}
			return claims[rapid.IntRange(0, len(claims)-1).Draw(rt, "claim")], true
		}
		n := rapid.IntRange(1, 40).Draw(rt, "steps")
		for range n {
			now := e.clock.Now()
			k := rapid.SampledFrom(keys).Draw(rt, "key")
			switch op := rapid.SampledFrom([]string{"try", "confirm", "release", "renew", "is", "wait"}).Draw(rt, "op"); op {
			case "try":
				want := idempotency.Claimed
				if en, ok := live(k); ok {
					want = idempotency.InProgress
					if en.confirmed {
						want = idempotency.AlreadyConfirmed
					}
				}
				got, c, err := e.s.TryClaim(ctx, k)
				if err != nil || got != want {
					rt.Fatalf("%s(%s) = %v, %v; model says %v", op, k.ID, got, err, want)
				}
				if got == idempotency.Claimed {
					if c.Key != k || c.Token == "" || !c.Expires.Equal(now.Add(ttl)) {
						rt.Fatalf("%s(%s) claim %+v, want key, token and expiry now+TTL", op, k.ID, c)
					}
					model[k] = entry{owner: c.Token, expires: now.Add(ttl)}
					claims = append(claims, c)
				}
			case "confirm", "release", "renew":
				c, ok := pickClaim()
				if !ok {
					continue
				}
				var want error
				if !held(c) {
					want = idempotency.ErrClaimLost
				}
				var err error
				switch op {
				case "confirm":
					err = e.s.Confirm(ctx, c)
					if want == nil {
						model[c.Key] = entry{confirmed: true, expires: now.Add(ret)}
					}
				case "release":
					err = e.s.Release(ctx, c)
					if want == nil {
						delete(model, c.Key)
					}
				case "renew":
					var r idempotency.Claim
					r, err = e.s.Renew(ctx, c)
					if want == nil {
						if r.Token != c.Token || !r.Expires.Equal(now.Add(ttl)) {
							rt.Fatalf("Renew = %+v, want token %s expiring %v", r, c.Token, now.Add(ttl))
						}
						model[c.Key] = entry{owner: c.Token, expires: now.Add(ttl)}
					}
				}
				if want == nil && err != nil || want != nil && !errors.Is(err, want) {
					rt.Fatalf("%s(%s, %.8s) = %v, model says %v", op, c.Key.ID, c.Token, err, want)
				}
			case "is":
				en, ok := live(k)
				want := ok && en.confirmed
				got, err := e.s.IsConfirmed(ctx, k)
				if err != nil || got != want {
					rt.Fatalf("IsConfirmed(%s) = %v, %v; model says %v", k.ID, got, err, want)
				}
			case "wait":
				e.clock.Advance(rapid.SampledFrom(steps).Draw(rt, "wait"))
			}
		}
	})
}
