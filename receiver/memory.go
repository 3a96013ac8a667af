package receiver

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"hash/maphash"
	"log/slog"
	"sync"
	"time"

	"github.com/acemq/msgaudit/bitsetbin"
	"github.com/acemq/msgaudit/internal/logkey"
	"github.com/hashicorp/golang-lru/v2/simplelru"
)

// Auditor is the connection audit consulted by the memory selector: a
// per-destination (queues) or per-consumer (topics) window of producer
// sequence bits. ConnAudit adapts *connaudit.Audit to it.
//
// Check records id and says whether it was seen (bitsetbin.FirstSeen, Duplicate,
// TooOld); an error means the id cannot be audited (malformed or too long)
// and nothing was recorded. Rollback clears a recorded id. Implementations
// must be safe for concurrent use.
type Auditor interface {
	Check(consumer, destination, id string) (bitsetbin.Sighting, error)
	Rollback(consumer, destination, id string) error
}

// memoryShards is the number of independently locked shards of the
// in-flight/outcome table.
const memoryShards = 16

// memorySelector is the cheap first tier: the connection audit plus the
// receiver's in-flight/outcome table (key → in flight | completed; a failed
// delivery leaves no entry because its audit bit is rolled back). It knows
// what happened in this process since it started (or since the audit
// snapshot it was restored from):
//
//   - key in flight here: wait (bounded by ctx and the wait limit) for the
//     original's outcome: completed → Reject("in-flight"); failed →
//     decide again (the bit is rolled back, so this delivery may run);
//     still unknown → Defer("in-flight"). Never an Accept or Reject while
//     the original's outcome is unknown.
//   - key completed here (bounded LRU): Reject("audit") — no store round
//     trip (two-tier).
//   - audit New: Accept, recording the key as in flight.
//   - audit Duplicate with no table entry (the table entry was evicted, or
//     the audit was restored from a snapshot): with a durable tier after
//     this one, Accept and let it decide; without one, Reject("audit")
//     (ActiveMQ's behaviour — snapshot an audit only when nothing is in
//     flight, or run a store).
//   - audit TooOld: nothing recorded by the audit; Accept (a durable tier
//     decides; without one this is the documented fail-open, counted in
//     Metrics.TooOldFailOpen).
//   - audit error (an id it cannot parse): with a durable tier, Accept
//     (table-only tracking, counted in Metrics.AuditBypass); without one,
//     an error wrapping ErrBadKey (dead-letter).
//
// The table's lock covers the audit check and the table update, so two
// concurrent deliveries of one key cannot both be taken as new.
type memorySelector struct {
	audit   Auditor
	durable bool
	wait    time.Duration
	metrics *Metrics
	log     *slog.Logger
	seed    maphash.Seed
	shards  [memoryShards]memShard
}

type memShard struct {
	mu       sync.Mutex
	inflight map[string]*flight
	done     *simplelru.LRU[string, struct{}]
}

// flight is one in-flight delivery; done is closed when it settles.
type flight struct {
	done      chan struct{}
	completed bool
}

// memoryOptions configure a memorySelector.
type memoryOptions struct {
	// Audit is the connection audit; nil means table only.
	Audit Auditor
	// Durable says a durable selector follows this one (it decides what
	// memory cannot know). New sets it from the Config.
	Durable bool
	// Wait bounds the wait for an in-flight original: 0 means 10 s, a
	// negative value means do not wait (Defer at once).
	Wait time.Duration
	// Completed is the number of completed keys remembered (LRU); 0 means
	// 65536.
	Completed int
	// Metrics receives TooOldFailOpen and AuditBypass counts; nil is allowed.
	Metrics *Metrics
	// Logger; nil is silent.
	Logger *slog.Logger
}

// defaultInFlightWait is how long a duplicate waits for its in-flight
// original by default.
const defaultInFlightWait = 10 * time.Second

// defaultCompleted is the default number of completed keys remembered.
const defaultCompleted = 1 << 16

// newMemorySelector returns a memorySelector.
func newMemorySelector(o memoryOptions) (*memorySelector, error) {
	if o.Completed < 0 {
		return nil, fmt.Errorf("%w: negative completed size %d", ErrConfig, o.Completed)
	}
	if o.Completed == 0 {
		o.Completed = defaultCompleted
	}
	if o.Wait == 0 {
		o.Wait = defaultInFlightWait
	}
	s := &memorySelector{audit: o.Audit, durable: o.Durable, wait: o.Wait, metrics: o.Metrics,
		log: orDiscard(o.Logger), seed: maphash.MakeSeed()}
	per := (o.Completed + memoryShards - 1) / memoryShards
	for i := range s.shards {
		lru, err := simplelru.NewLRU[string, struct{}](per, nil)
		if err != nil {
			return nil, fmt.Errorf("%w: %v", ErrConfig, err)
		}
		s.shards[i].inflight = make(map[string]*flight)
		s.shards[i].done = lru
	}
	return s, nil
}

// Name returns "memory".
func (s *memorySelector) Name() string { return "memory" }

// maxKeyBytes is the longest idempotency key the receiver keeps or logs
// as it is. The in-flight and completed tables and the failure counts hold
// a longer key (with its scope) as its SHA-256, so 65,536 completed keys
// cost a bounded amount whatever producers send; log lines carry its first
// 64 bytes, its length and its SHA-256 (logKey). The idempotency store
// applies its own MaxKeyLength, hashing longer keys as well.
const maxKeyBytes = logkey.MaxBytes

// tableKey is the key of m in the tables, joinKey of its scope and
// idempotency key.
func tableKey(m *Message) string { return joinKey(m.Scope(), m.IdempotencyKey()) }

// joinKey joins scope and key injectively: "k", the scope's length (a
// uvarint), the scope and the key when that fits in maxKeyBytes, else "h"
// and the SHA-256 of the same length, scope and key. The length says where
// the scope ends whatever bytes either holds, and the first byte keeps the
// two forms apart.
func joinKey(scope, key string) string {
	var n [binary.MaxVarintLen64]byte
	prefix := binary.AppendUvarint(n[:0], uint64(len(scope)))
	if 1+len(prefix)+len(scope)+len(key) <= maxKeyBytes {
		return "k" + string(prefix) + scope + key
	}
	h := sha256.New()
	h.Write(prefix)
	h.Write([]byte(scope))
	h.Write([]byte(key))
	return string(h.Sum([]byte("h")))
}

// logKey is how the receiver logs an idempotency key: whole up to
// maxKeyBytes, else its first 64 bytes followed by "...", its length and
// its hex SHA-256, so a log line stays bounded whatever the key
// (logkey.String, which oteltrace's spans use as well).
func logKey(key string) string { return logkey.String(key) }

func (s *memorySelector) shard(k string) *memShard {
	return &s.shards[maphash.String(s.seed, k)%memoryShards]
}

// Select decides about m as described on memorySelector.
func (s *memorySelector) Select(ctx context.Context, m *Message) (Decision, error) {
	k := tableKey(m)
	sh := s.shard(k)
	waited := false
	var deadline <-chan time.Time
	for {
		sh.mu.Lock()
		if f := sh.inflight[k]; f != nil {
			sh.mu.Unlock()
			if s.wait < 0 {
				return Decision{Verdict: Defer, Reason: "in-flight", Detail: "in-flight"}, nil
			}
			if deadline == nil {
				t := time.NewTimer(s.wait)
				defer t.Stop()
				deadline = t.C
			}
			waited = true
			select {
			case <-f.done:
				if f.completed {
					return Decision{Verdict: Reject, Reason: "in-flight", Detail: "in-flight-completed"}, nil
				}
				continue // failed: its bit is rolled back; decide again
			case <-ctx.Done():
			case <-deadline:
			}
			return Decision{Verdict: Defer, Reason: "in-flight", Detail: "in-flight"}, nil
		}
		if sh.done.Contains(k) {
			sh.mu.Unlock()
			reason := "audit"
			if waited {
				reason = "in-flight"
			}
			return Decision{Verdict: Reject, Reason: reason, Detail: "completed"}, nil
		}
		detail, bit := "untracked", false
		if s.audit != nil {
			v, err := s.audit.Check(m.Consumer, m.Destination, m.IdempotencyKey())
			switch {
			case err != nil:
				if !s.durable {
					sh.mu.Unlock()
					return Decision{}, fmt.Errorf("%w: %w", ErrBadKey, err)
				}
				detail = "unchecked"
				s.metrics.inc(&s.metrics.AuditBypass)
			case v == bitsetbin.FirstSeen:
				detail, bit = "new", true
			case v == bitsetbin.Duplicate:
				if !s.durable {
					sh.mu.Unlock()
					return Decision{Verdict: Reject, Reason: "audit", Detail: "duplicate"}, nil
				}
				// Seen before, but this table does not know the outcome:
				// the durable tier decides. The bit is ours to roll back
				// if this delivery fails.
				detail, bit = "duplicate-unknown", true
			default: // TooOld: nothing recorded
				detail = "too-old"
				if !s.durable {
					s.metrics.inc(&s.metrics.TooOldFailOpen)
					s.log.Warn("receiver: id below the audit window, treated as new (no durable store)",
						"destination", m.Destination, "key", logKey(m.IdempotencyKey()))
				}
			}
		}
		f := &flight{done: make(chan struct{})}
		sh.inflight[k] = f
		sh.mu.Unlock()
		return Decision{Verdict: Accept, Reason: "new", Detail: detail, Settle: func(_ context.Context, st Settlement) error {
			s.settle(sh, k, f, m, bit, st)
			return nil
		}}, nil
	}
}

func (s *memorySelector) settle(sh *memShard, k string, f *flight, m *Message, bit bool, st Settlement) {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if sh.inflight[k] != f {
		return // already settled
	}
	delete(sh.inflight, k)
	if st == Completed {
		f.completed = true
		sh.done.Add(k, struct{}{})
	} else if bit {
		if err := s.audit.Rollback(m.Consumer, m.Destination, m.IdempotencyKey()); err != nil {
			s.log.Warn("receiver: audit rollback failed", "destination", m.Destination, "key", logKey(m.IdempotencyKey()), "err", err)
		}
	}
	close(f.done)
}

// Forget rolls back the audit bit of m when this table holds no entry for
// its key (neither in flight nor completed) and reports whether it did.
// Transports call it (through Receiver.Forget) for a delivery that will
// come back without having run; a key known here is left alone, because
// its bit belongs to a delivery that is running or finished.
func (s *memorySelector) Forget(m *Message) bool {
	if s.audit == nil {
		return false
	}
	k := tableKey(m)
	sh := s.shard(k)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if sh.inflight[k] != nil || sh.done.Contains(k) {
		return false
	}
	return s.audit.Rollback(m.Consumer, m.Destination, m.IdempotencyKey()) == nil
}

// state reports what the table knows about m's key (m.Key, or the key
// Process derived) in m's scope: "in-flight", "done" (completed, kept in a
// bounded LRU) or "unknown" (never seen here, failed and rolled back, or
// evicted from the completed LRU).
func (s *memorySelector) state(m *Message) string {
	k := tableKey(m)
	sh := s.shard(k)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	switch {
	case sh.inflight[k] != nil:
		return "in-flight"
	case sh.done.Contains(k):
		return "done"
	}
	return "unknown"
}

// inFlightCount returns the number of deliveries in flight.
func (s *memorySelector) inFlightCount() int {
	n := 0
	for i := range s.shards {
		s.shards[i].mu.Lock()
		n += len(s.shards[i].inflight)
		s.shards[i].mu.Unlock()
	}
	return n
}

func orDiscard(l *slog.Logger) *slog.Logger {
	if l == nil {
		return slog.New(slog.DiscardHandler)
	}
	return l
}
