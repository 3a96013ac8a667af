package idempotency

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"hash/maphash"
	"math"
	"math/bits"
	"sync"
	"sync/atomic"
	"time"
)

// memoryShards is the number of independently locked maps in a Memory.
const memoryShards = 64

// memKey identifies a key inside a Memory: a 128-bit fingerprint of the
// namespace and id from two independently, randomly seeded hashes. Map
// keys and values hold no pointers, so the garbage collector never scans
// the maps and an entry costs the same whatever the key's length.
type memKey [2]uint64

// memEntry is the state of one key: claimed by the holder of token number
// seq (never 0) until expires, or confirmed (seq 0) and retained until
// expires; since is when it took that state (a renewal leaves it). Times
// are Unix nanoseconds of the store's clock; an entry with expires <= now
// is gone.
type memEntry struct {
	seq     uint64
	expires int64
	since   int64
}

// confirmed reports whether e is a confirmation rather than a claim.
func (e memEntry) confirmed() bool { return e.seq == 0 }

type memShard struct {
	mu sync.Mutex
	m  map[memKey]memEntry
	_  [48]byte // keep neighbouring shard locks off one cache line
}

// Memory is an in-process Store for tests and single-process consumers.
// Keys are spread over 64 shards, each a map behind its own mutex, so
// operations on different keys rarely contend; every operation on one key
// runs in a single critical section. Expired claims and confirmations are
// dropped lazily when their key is touched, and all at once by Purge; no
// goroutine runs in the background. Time comes from Options.Clock; the
// default, the system clock, is read through the monotonic clock (see
// monoClock), so a step of the wall clock neither expires nor extends
// claims in memory.
//
// A key is held as a 128-bit fingerprint of its namespace and id (two
// hash/maphash hashes with secret random seeds), not as the strings: about
// 40 bytes per key whatever its length, and no pointers for the garbage
// collector to scan. Two distinct keys share a fingerprint with
// probability about n²/2¹²⁹ for n keys held (10⁻²¹ for a billion), and
// the seeds being secret, nobody can construct such a pair.
// Options.MaxKeyLength does not apply.
//
// The zero value is not usable; call NewMemory. A Memory is safe for
// concurrent use. Its contents are lost with the process.
type Memory struct {
	ttl, retention time.Duration
	clock          Clock
	seed1, seed2   maphash.Seed
	tokenPrefix    string // 16 hex digits, random per store
	tokenSeq       atomic.Uint64
	closed         atomic.Bool
	shards         [memoryShards]memShard
}

var _ BatchStore = (*Memory)(nil)

// NewMemory returns an empty in-memory store. Invalid options (a negative
// ClaimTTL, Retention or MaxKeyLength) are an error wrapping ErrOptions.
func NewMemory(o Options) (*Memory, error) {
	o, err := o.normalize()
	if err != nil {
		return nil, err
	}
	clock := o.Clock
	if _, ok := clock.(systemClock); ok {
		clock = newMonoClock()
	}
	m := &Memory{
		ttl:         o.ClaimTTL,
		retention:   o.Retention,
		clock:       clock,
		seed1:       maphash.MakeSeed(),
		seed2:       maphash.MakeSeed(),
		tokenPrefix: randomHex8(),
	}
	for i := range m.shards {
		m.shards[i].m = make(map[memKey]memEntry)
	}
	return m, nil
}

// key fingerprints k and picks its shard. Namespace and id are hashed
// separately and combined, so ("a", "bc") and ("ab", "c") differ.
func (m *Memory) key(k Key) (memKey, *memShard) {
	const mul = 0x9e3779b97f4a7c15
	mk := memKey{
		maphash.String(m.seed1, k.Namespace)*mul ^ maphash.String(m.seed1, k.ID),
		maphash.String(m.seed2, k.Namespace)*mul ^ maphash.String(m.seed2, k.ID),
	}
	return mk, &m.shards[mk[0]%memoryShards]
}

// newToken returns the token for claim number seq: the store's random
// prefix and seq, 32 hex digits. Tokens are unique within the store (a
// counter) and, with overwhelming probability, across stores (the
// prefix). It costs one small allocation instead of a crypto/rand read.
func (m *Memory) newToken(seq uint64) string {
	var s [32]byte
	copy(s[:16], m.tokenPrefix)
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], seq)
	hex.Encode(s[16:], b[:])
	return string(s[:])
}

// parseToken returns the claim number in token, or 0 (never a claim's
// number) when token was not made by this store.
func (m *Memory) parseToken(token string) uint64 {
	if len(token) != 32 || token[:16] != m.tokenPrefix {
		return 0
	}
	var n uint64
	for i := 16; i < 32; i++ {
		c := token[i]
		switch {
		case '0' <= c && c <= '9':
			n = n<<4 | uint64(c-'0')
		case 'a' <= c && c <= 'f':
			n = n<<4 | uint64(c-'a'+10)
		default:
			return 0
		}
	}
	return n
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
		if e.confirmed() {
			return AlreadyConfirmed, Claim{}, nil
		}
		return InProgress, Claim{}, nil
	}
	seq := m.tokenSeq.Add(1)
	sh.m[mk] = memEntry{seq: seq, expires: addNanos(nowN, m.ttl), since: nowN}
	sh.mu.Unlock()
	return Claimed, Claim{Key: key, Token: m.newToken(seq), Expires: now.Add(m.ttl)}, nil
}

// held reports whether e is a live claim with number seq (0 matches
// nothing).
func held(e memEntry, found bool, seq uint64, now int64) bool {
	return found && e.seq == seq && seq != 0 && e.expires > now
}

// lockHeld checks c and, when it is a live claim on its key, returns the
// key's shard locked (the caller unlocks it), the map key, the entry and
// the time of the check. Otherwise nothing is locked and the error is the
// check's or ErrClaimLost.
func (m *Memory) lockHeld(ctx context.Context, c Claim) (sh *memShard, mk memKey, e memEntry, now time.Time, err error) {
	if err := m.check(ctx, c.Key); err != nil {
		return nil, mk, e, now, err
	}
	seq := m.parseToken(c.Token)
	now = m.clock.Now()
	mk, sh = m.key(c.Key)
	sh.mu.Lock()
	e, ok := sh.m[mk]
	if !held(e, ok, seq, now.UnixNano()) {
		sh.mu.Unlock()
		return nil, mk, e, now, ErrClaimLost
	}
	return sh, mk, e, now, nil
}

// Confirm marks the work finished and remembers it for the retention
// period. It returns ErrClaimLost, changing nothing, unless c is a live
// claim on its key.
func (m *Memory) Confirm(ctx context.Context, c Claim) error {
	sh, mk, _, now, err := m.lockHeld(ctx, c)
	if err != nil {
		return err
	}
	sh.m[mk] = memEntry{expires: addNanos(now.UnixNano(), m.retention), since: now.UnixNano()}
	sh.mu.Unlock()
	return nil
}

// Release drops the claim so the next delivery can claim the key. It
// returns ErrClaimLost, changing nothing, unless c is a live claim.
func (m *Memory) Release(ctx context.Context, c Claim) error {
	sh, mk, _, _, err := m.lockHeld(ctx, c)
	if err != nil {
		return err
	}
	delete(sh.m, mk)
	sh.mu.Unlock()
	return nil
}

// Renew extends a live claim to now plus the claim TTL and returns the
// renewed claim. It returns ErrClaimLost, changing nothing, unless c is a
// live claim.
func (m *Memory) Renew(ctx context.Context, c Claim) (Claim, error) {
	sh, mk, e, now, err := m.lockHeld(ctx, c)
	if err != nil {
		return Claim{}, err
	}
	e.expires = addNanos(now.UnixNano(), m.ttl)
	sh.m[mk] = e
	sh.mu.Unlock()
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
	return ok && e.confirmed() && e.expires > now, nil
}

// shardMask returns the set of shards (bit i for shard i) holding the
// valid keys among keys; key(i) returns the i-th key.
func (m *Memory) shardMask(n int, key func(i int) Key) uint64 {
	var mask uint64
	for i := range n {
		k := key(i)
		if k.Validate() != nil {
			continue
		}
		mk, _ := m.key(k)
		mask |= 1 << (mk[0] % memoryShards)
	}
	return mask
}

// lockShards locks the shards in mask in ascending order (so two batches
// never deadlock), unlockShards unlocks them.
func (m *Memory) lockShards(mask uint64) {
	for ; mask != 0; mask &= mask - 1 {
		m.shards[bits.TrailingZeros64(mask)].mu.Lock()
	}
}

func (m *Memory) unlockShards(mask uint64) {
	for ; mask != 0; mask &= mask - 1 {
		m.shards[bits.TrailingZeros64(mask)].mu.Unlock()
	}
}

// checkBatch returns the error a whole batch fails with: a length
// mismatch, an ended context or a closed store.
func (m *Memory) checkBatch(ctx context.Context, op string, n, results int) error {
	if n != results {
		return fmt.Errorf("idempotency: %s with %d entries and %d result slots", op, n, results)
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if m.closed.Load() {
		return ErrClosed
	}
	return nil
}

// TryClaimBatch try-claims every key as TryClaim would, in slice order,
// under one acquisition of the locks of the shards involved: the batch is
// atomic with respect to every other operation on the store, and sees one
// instant of the clock. An invalid key gets ErrInvalidKey in its result;
// a cancelled context or a closed store fails the whole batch.
func (m *Memory) TryClaimBatch(ctx context.Context, keys []Key, res []ClaimResult) error {
	if err := m.checkBatch(ctx, "TryClaimBatch", len(keys), len(res)); err != nil {
		return err
	}
	if len(keys) == 0 {
		return nil
	}
	mask := m.shardMask(len(keys), func(i int) Key { return keys[i] })
	now := m.clock.Now()
	nowN := now.UnixNano()
	m.lockShards(mask)
	for i, k := range keys {
		if err := k.Validate(); err != nil {
			res[i] = ClaimResult{Err: err}
			continue
		}
		mk, sh := m.key(k)
		if e, ok := sh.m[mk]; ok && e.expires > nowN {
			if e.confirmed() {
				res[i] = ClaimResult{Outcome: AlreadyConfirmed}
			} else {
				res[i] = ClaimResult{Outcome: InProgress}
			}
			continue
		}
		seq := m.tokenSeq.Add(1)
		sh.m[mk] = memEntry{seq: seq, expires: addNanos(nowN, m.ttl), since: nowN}
		res[i] = ClaimResult{Outcome: Claimed, Claim: Claim{Key: k, Token: m.newToken(seq), Expires: now.Add(m.ttl)}}
	}
	m.unlockShards(mask)
	return nil
}

// settleBatch runs Confirm (confirm true) or Release on every claim, in
// slice order, under one acquisition of the shard locks involved.
func (m *Memory) settleBatch(ctx context.Context, op string, claims []Claim, errs []error, confirm bool) error {
	if err := m.checkBatch(ctx, op, len(claims), len(errs)); err != nil {
		return err
	}
	if len(claims) == 0 {
		return nil
	}
	mask := m.shardMask(len(claims), func(i int) Key { return claims[i].Key })
	nowN := m.clock.Now().UnixNano()
	m.lockShards(mask)
	for i, c := range claims {
		if err := c.Key.Validate(); err != nil {
			errs[i] = err
			continue
		}
		mk, sh := m.key(c.Key)
		e, ok := sh.m[mk]
		if !held(e, ok, m.parseToken(c.Token), nowN) {
			errs[i] = ErrClaimLost
			continue
		}
		errs[i] = nil
		if confirm {
			sh.m[mk] = memEntry{expires: addNanos(nowN, m.retention), since: nowN}
		} else {
			delete(sh.m, mk)
		}
	}
	m.unlockShards(mask)
	return nil
}

// ConfirmBatch confirms every claim as Confirm would, in slice order,
// under one acquisition of the shard locks involved; a claim not held gets
// ErrClaimLost and an invalid key ErrInvalidKey in errs.
func (m *Memory) ConfirmBatch(ctx context.Context, claims []Claim, errs []error) error {
	return m.settleBatch(ctx, "ConfirmBatch", claims, errs, true)
}

// ReleaseBatch releases every claim as Release would, in slice order,
// under one acquisition of the shard locks involved; a claim not held gets
// ErrClaimLost and an invalid key ErrInvalidKey in errs.
func (m *Memory) ReleaseBatch(ctx context.Context, claims []Claim, errs []error) error {
	return m.settleBatch(ctx, "ReleaseBatch", claims, errs, false)
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

// Backlog counts the live claims and every entry kept (expired ones not
// yet purged included) and finds the oldest of each, exactly. Unlike the
// SQL stores' samples it visits every entry, one shard lock at a time:
// 20 to 40 ms per million keys, each shard's lock held for a 64th of it.
func (m *Memory) Backlog(ctx context.Context) (Backlog, error) {
	if err := ctx.Err(); err != nil {
		return Backlog{}, err
	}
	if m.closed.Load() {
		return Backlog{}, ErrClosed
	}
	now := m.clock.Now().UnixNano()
	var b Backlog
	oldestHeld, oldestRow := now, now
	for i := range m.shards {
		sh := &m.shards[i]
		sh.mu.Lock()
		b.Rows += int64(len(sh.m))
		for _, e := range sh.m {
			oldestRow = min(oldestRow, e.since)
			if !e.confirmed() && e.expires > now {
				b.Held++
				oldestHeld = min(oldestHeld, e.since)
			}
		}
		sh.mu.Unlock()
	}
	b.OldestHeld = time.Duration(now - oldestHeld)
	b.OldestRow = time.Duration(now - oldestRow)
	return b, nil
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

// monoClock is the system clock read the cheap way: the wall time taken
// once at creation plus the monotonic time elapsed since, one clock read
// per call where time.Now takes two. It is immune to wall clock steps,
// which suits a store that lives only as long as its process.
type monoClock struct{ base time.Time }

func newMonoClock() monoClock { return monoClock{base: time.Now()} }

// Now returns the creation time plus the monotonic time elapsed since.
func (c monoClock) Now() time.Time { return c.base.Add(time.Since(c.base)) }

// randomHex8 returns 8 bytes from crypto/rand as 16 hex digits: the prefix
// that makes one memory store's tokens foreign to any other's.
func randomHex8() string {
	var b [8]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go 1.24+); it crashes the program instead.
	return hex.EncodeToString(b[:])
}
