package receiver_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/acemq/msgaudit/bitsetbin"
	"github.com/acemq/msgaudit/idempotency"
)

// fakeAudit is a reference model of the connection audit: a set of
// recorded ids per scope (destination for queues, consumer for topics).
// Ids must look like "<key>:<decimal seq>"; a key starting with "old" is
// below the window (TooOld).
type fakeAudit struct {
	mu        sync.Mutex
	set       map[string]bool
	rollbacks int
}

func newFakeAudit() *fakeAudit { return &fakeAudit{set: map[string]bool{}} }

func auditScope(consumer, dest string) string {
	if strings.HasPrefix(dest, "/topic/") || strings.HasPrefix(dest, "/temp-topic/") {
		return "c:" + consumer
	}
	return "d:" + dest
}

func parseID(id string) error {
	i := strings.LastIndexByte(id, ':')
	if i <= 0 {
		return errors.New("fake audit: malformed id " + strconv.Quote(id))
	}
	if _, err := strconv.ParseUint(id[i+1:], 10, 64); err != nil {
		return errors.New("fake audit: malformed id " + strconv.Quote(id))
	}
	return nil
}

func (a *fakeAudit) Check(consumer, dest, id string) (bitsetbin.Sighting, error) {
	if err := parseID(id); err != nil {
		return bitsetbin.FirstSeen, err
	}
	if strings.HasPrefix(id, "old") {
		return bitsetbin.TooOld, nil
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	k := auditScope(consumer, dest) + "|" + id
	if a.set[k] {
		return bitsetbin.Duplicate, nil
	}
	a.set[k] = true
	return bitsetbin.FirstSeen, nil
}

func (a *fakeAudit) Rollback(consumer, dest, id string) error {
	if err := parseID(id); err != nil {
		return err
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	delete(a.set, auditScope(consumer, dest)+"|"+id)
	a.rollbacks++
	return nil
}

func (a *fakeAudit) has(consumer, dest, id string) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.set[auditScope(consumer, dest)+"|"+id]
}

// snapshot copies the audit (a persisted snapshot restored on restart).
func (a *fakeAudit) snapshot() *fakeAudit {
	a.mu.Lock()
	defer a.mu.Unlock()
	return &fakeAudit{set: maps.Clone(a.set)}
}

// manualClock is a clock tests move by hand.
type manualClock struct {
	mu  sync.Mutex
	now time.Time
}

func newClock() *manualClock { return &manualClock{now: time.Unix(1_800_000_000, 0)} }

func (c *manualClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *manualClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

var errStoreDown = errors.New("fake store: connection refused")

// fakeStore is a reference model of idempotency.Store (claims are leases
// with owner tokens, confirmations are kept) with fault injection.
type fakeStore struct {
	mu      sync.Mutex
	clock   *manualClock
	ttl     time.Duration
	entries map[idempotency.Key]*fakeEntry
	tokens  int
	calls   map[string]int
	// faults: the named operation fails while fail[op] > 0 (decremented
	// per failure; -1 = always).
	fail map[string]int
}

type fakeEntry struct {
	confirmed bool
	owner     string
	expires   time.Time
}

func newFakeStore(clock *manualClock) *fakeStore {
	return &fakeStore{clock: clock, ttl: time.Minute, entries: map[idempotency.Key]*fakeEntry{},
		calls: map[string]int{}, fail: map[string]int{}}
}

func (s *fakeStore) failing(op string) bool {
	s.calls[op]++
	n := s.fail[op]
	if n == 0 {
		return false
	}
	if n > 0 {
		s.fail[op] = n - 1
	}
	return true
}

func (s *fakeStore) setFail(op string, n int) {
	s.mu.Lock()
	s.fail[op] = n
	s.mu.Unlock()
}

func (s *fakeStore) callCount(op string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.calls[op]
}

func (s *fakeStore) state(k idempotency.Key) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.entries[k]
	switch {
	case e == nil:
		return "free"
	case e.confirmed:
		return "confirmed"
	case e.owner != "" && e.expires.After(s.clock.Now()):
		return "claimed"
	}
	return "free"
}

func (s *fakeStore) TryClaim(ctx context.Context, k idempotency.Key) (idempotency.Outcome, idempotency.Claim, error) {
	if err := ctx.Err(); err != nil {
		return 0, idempotency.Claim{}, err
	}
	if k.Namespace == "" && k.ID == "" || strings.Contains(k.ID, "\x00") {
		return 0, idempotency.Claim{}, idempotency.ErrInvalidKey
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.failing("tryclaim") {
		return 0, idempotency.Claim{}, errStoreDown
	}
	now := s.clock.Now()
	e := s.entries[k]
	if e != nil && e.confirmed {
		return idempotency.AlreadyConfirmed, idempotency.Claim{}, nil
	}
	if e != nil && e.owner != "" && e.expires.After(now) {
		return idempotency.InProgress, idempotency.Claim{}, nil
	}
	s.tokens++
	c := idempotency.Claim{Key: k, Token: "t" + strconv.Itoa(s.tokens), Expires: now.Add(s.ttl)}
	s.entries[k] = &fakeEntry{owner: c.Token, expires: c.Expires}
	return idempotency.Claimed, c, nil
}

func (s *fakeStore) held(c idempotency.Claim) (*fakeEntry, bool) {
	e := s.entries[c.Key]
	return e, e != nil && !e.confirmed && e.owner == c.Token && e.expires.After(s.clock.Now())
}

func (s *fakeStore) Confirm(ctx context.Context, c idempotency.Claim) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.failing("confirm") {
		return errStoreDown
	}
	e, ok := s.held(c)
	if !ok {
		return idempotency.ErrClaimLost
	}
	e.confirmed, e.owner = true, ""
	return nil
}

func (s *fakeStore) Release(ctx context.Context, c idempotency.Claim) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.failing("release") {
		return errStoreDown
	}
	if _, ok := s.held(c); !ok {
		return idempotency.ErrClaimLost
	}
	delete(s.entries, c.Key)
	return nil
}

func (s *fakeStore) Renew(ctx context.Context, c idempotency.Claim) (idempotency.Claim, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.failing("renew") {
		return c, errStoreDown
	}
	e, ok := s.held(c)
	if !ok {
		return c, idempotency.ErrClaimLost
	}
	e.expires = s.clock.Now().Add(s.ttl)
	c.Expires = e.expires
	return c, nil
}

func (s *fakeStore) IsConfirmed(ctx context.Context, k idempotency.Key) (bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.failing("isconfirmed") {
		return false, errStoreDown
	}
	e := s.entries[k]
	return e != nil && e.confirmed, nil
}

func (s *fakeStore) Close() error { return nil }

// stealClaim makes another owner hold k's claim (another consumer machine).
func (s *fakeStore) stealClaim(k idempotency.Key) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.tokens++
	s.entries[k] = &fakeEntry{owner: fmt.Sprintf("other%d", s.tokens), expires: s.clock.Now().Add(s.ttl)}
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
