package idempotency

import (
	"context"
	"encoding/binary"
	"encoding/hex"
	"hash/maphash"
	"math"
	"sync"
	"sync/atomic"
	"time"
)

// memoryShards is the number of independently locked maps in a Memory.
const memoryShards = 64

// memKey is a map key. A key whose storage form exceeds MaxKeyLength is
// kept as its hash (hashed set, id the hashed storage key, ns empty), so a
// store holding long ids stays bounded per entry; hashed keys never equal
// verbatim ones because of the flag.
type memKey struct {
	ns, id string
	hashed bool
}

// memEntry is the state of one key: claimed by owner until expires, or
// confirmed (owner empty) and retained until expires. Times are Unix
// nanoseconds of the store's clock; an entry with expires <= now is gone.
type memEntry struct {
	owner     string
	expires   int64
	confirmed bool
}

type memShard struct {
	mu sync.Mutex
	m  map[memKey]memEntry
	_  [40]byte // keep neighbouring shard locks off one cache line
}

// Memory is an in-process Store for tests and single-process consumers.
// Keys are spread over 64 shards, each a map behind its own mutex, so
// operations on different keys rarely contend; every operation on one key
// runs in a single critical section. Expired claims and confirmations are
// dropped lazily when their key is touched, and all at once by Purge; no
// goroutine runs in the background. Time comes from Options.Clock.
//
// The zero value is not usable; call NewMemory. A Memory is safe for
// concurrent use. Its contents are lost with the process.
type Memory struct {
	ttl, retention time.Duration
	clock          Clock
	maxKey         int
	seed           maphash.Seed
	tokenBase      uint64
	tokenSeq       atomic.Uint64
	closed         atomic.Bool
	shards         [memoryShards]memShard
}

var _ Store = (*Memory)(nil)

// NewMemory returns an empty in-memory store. It panics if o is invalid
// (see Options.Validate): options are the caller's constants, so a bad
// value is a programming error.
func NewMemory(o Options) *Memory {
	o, err := o.normalize()
	if err != nil {
		panic(err.Error())
	}
	m := &Memory{
		ttl:       o.ClaimTTL,
		retention: o.Retention,
		clock:     o.Clock,
		maxKey:    o.MaxKeyLength,
		seed:      maphash.MakeSeed(),
	}
	var b [8]byte
	tok := NewToken()
	_, _ = hex.Decode(b[:], []byte(tok[:16]))
	m.tokenBase = binary.LittleEndian.Uint64(b[:])
	for i := range m.shards {
		m.shards[i].m = make(map[memKey]memEntry)
	}
	return m
}

// key maps k to its map key and shard.
func (m *Memory) key(k Key) (memKey, *memShard) {
	var mk memKey
	if len(k.Namespace)+1+len(k.ID) > m.maxKey {
		mk = memKey{id: k.StorageKey(m.maxKey), hashed: true}
	} else {
		mk = memKey{ns: k.Namespace, id: k.ID}
	}
	h := maphash.String(m.seed, mk.id) ^ maphash.String(m.seed, mk.ns)*0x9e3779b97f4a7c15
	return mk, &m.shards[h%memoryShards]
}

// newToken returns an owner token unique within this store (a counter)
// and, with overwhelming probability, across stores (a random base). It
// costs one small allocation instead of a crypto/rand read.
func (m *Memory) newToken() string {
	var b [16]byte
	binary.BigEndian.PutUint64(b[:8], m.tokenBase)
	binary.BigEndian.PutUint64(b[8:], m.tokenSeq.Add(1))
	var s [32]byte
	hex.Encode(s[:], b[:])
	return string(s[:])
}

// check returns the error every operation starts with.
func (m *Memory) check(ctx context.Context, k Key) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if m.closed.Load() {
		return ErrClosed
	}
	return k.Validate()
}

// addNanos returns t+d in Unix nanoseconds, saturating instead of
// overflowing.
func addNanos(t int64, d time.Duration) int64 {
	if t > math.MaxInt64-int64(d) {
		return math.MaxInt64
	}
	return t + int64(d)
}

// TryClaim claims key if it is free (never claimed, released, or its claim
// or confirmation expired); otherwise it reports AlreadyConfirmed or
// InProgress. It runs in one critical section.
func (m *Memory) TryClaim(ctx context.Context, key Key) (Outcome, Claim, error) {
	if err := m.check(ctx, key); err != nil {
		return 0, Claim{}, err
	}
	now := m.clock.Now()
	nowN := now.UnixNano()
	mk, sh := m.key(key)
	sh.mu.Lock()
	if e, ok := sh.m[mk]; ok && e.expires > nowN {
		sh.mu.Unlock()
		if e.confirmed {
			return AlreadyConfirmed, Claim{}, nil
		}
		return InProgress, Claim{}, nil
	}
	tok := m.newToken()
	exp := now.Add(m.ttl)
	sh.m[mk] = memEntry{owner: tok, expires: addNanos(nowN, m.ttl)}
	sh.mu.Unlock()
	return Claimed, Claim{Key: key, Token: tok, Expires: exp}, nil
}

// Claim takes a lease on key; ok is false when the key is claimed by
// someone else or confirmed.
func (m *Memory) Claim(ctx context.Context, key Key) (Claim, bool, error) {
	o, c, err := m.TryClaim(ctx, key)
	return c, o == Claimed, err
}

// held reports whether e is a live claim owned by token.
func held(e memEntry, found bool, token string, now int64) bool {
	return found && !e.confirmed && e.owner == token && token != "" && e.expires > now
}

// Confirm marks the work finished and remembers it for the retention
// period. It returns ErrClaimLost, changing nothing, unless c is a live
// claim on its key.
func (m *Memory) Confirm(ctx context.Context, c Claim) error {
	if err := m.check(ctx, c.Key); err != nil {
		return err
	}
	now := m.clock.Now().UnixNano()
	mk, sh := m.key(c.Key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	e, ok := sh.m[mk]
	if !held(e, ok, c.Token, now) {
		return ErrClaimLost
	}
	sh.m[mk] = memEntry{confirmed: true, expires: addNanos(now, m.retention)}
	return nil
}

// Release drops the claim so the next delivery can claim the key. It
// returns ErrClaimLost, changing nothing, unless c is a live claim.
func (m *Memory) Release(ctx context.Context, c Claim) error {
	if err := m.check(ctx, c.Key); err != nil {
		return err
	}
	now := m.clock.Now().UnixNano()
	mk, sh := m.key(c.Key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	e, ok := sh.m[mk]
	if !held(e, ok, c.Token, now) {
		return ErrClaimLost
	}
	delete(sh.m, mk)
	return nil
}

// Renew extends a live claim to now plus the claim TTL and returns the
// renewed claim. It returns ErrClaimLost, changing nothing, unless c is a
// live claim.
func (m *Memory) Renew(ctx context.Context, c Claim) (Claim, error) {
	if err := m.check(ctx, c.Key); err != nil {
		return Claim{}, err
	}
	now := m.clock.Now()
	nowN := now.UnixNano()
	mk, sh := m.key(c.Key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	e, ok := sh.m[mk]
	if !held(e, ok, c.Token, nowN) {
		return Claim{}, ErrClaimLost
	}
	e.expires = addNanos(nowN, m.ttl)
	sh.m[mk] = e
	c.Expires = now.Add(m.ttl)
	return c, nil
}

// IsConfirmed reports whether key is confirmed and still retained.
func (m *Memory) IsConfirmed(ctx context.Context, key Key) (bool, error) {
	if err := m.check(ctx, key); err != nil {
		return false, err
	}
	now := m.clock.Now().UnixNano()
	mk, sh := m.key(key)
	sh.mu.Lock()
	e, ok := sh.m[mk]
	sh.mu.Unlock()
	return ok && e.confirmed && e.expires > now, nil
}

// Purge deletes every expired claim and confirmation and returns how many
// it deleted. Expired entries are already invisible; Purge only frees
// their memory. It locks one shard at a time.
func (m *Memory) Purge() int {
	now := m.clock.Now().UnixNano()
	n := 0
	for i := range m.shards {
		sh := &m.shards[i]
		sh.mu.Lock()
		for k, e := range sh.m {
			if e.expires <= now {
				delete(sh.m, k)
				n++
			}
		}
		sh.mu.Unlock()
	}
	return n
}

// Len returns the number of entries held, expired ones not yet purged
// included.
func (m *Memory) Len() int {
	n := 0
	for i := range m.shards {
		sh := &m.shards[i]
		sh.mu.Lock()
		n += len(sh.m)
		sh.mu.Unlock()
	}
	return n
}

// Close drops every entry; later calls return ErrClosed. Close is
// idempotent.
func (m *Memory) Close() error {
	if m.closed.Swap(true) {
		return nil
	}
	for i := range m.shards {
		sh := &m.shards[i]
		sh.mu.Lock()
		clear(sh.m)
		sh.mu.Unlock()
	}
	return nil
}
