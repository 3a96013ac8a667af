package receiver

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/acemq/msgaudit/internal/nilcheck"
	"github.com/acemq/msgaudit/metadata"
)

// ValueFunc derives the value a MetadataSelector stores for a message. An
// error (or an empty key from the key function) means the message can never
// be judged: the selector returns an error wrapping ErrBadKey and the
// receiver dead-letters the delivery.
type ValueFunc func(m *Message) (string, error)

// TimestampHeader is the header TimestampValue reads first.
const TimestampHeader = "timestamp"

// TimestampValue is the default ValueFunc, Spring's default value strategy
// (the message timestamp): the "timestamp" header when present (ActiveMQ
// sets it, in epoch milliseconds), else m.Timestamp in epoch milliseconds.
// A message with neither is an error.
func TimestampValue(m *Message) (string, error) {
	if v := m.Headers[TimestampHeader]; v != "" {
		return v, nil
	}
	if !m.Timestamp.IsZero() {
		return strconv.FormatInt(m.Timestamp.UnixMilli(), 10), nil
	}
	return "", errors.New("no timestamp header and no message timestamp")
}

// HeaderValue returns a ValueFunc (or, converted, a KeyFunc) that reads
// header name; a missing or empty header is an error.
func HeaderValue(name string) ValueFunc {
	return func(m *Message) (string, error) {
		v := m.Headers[name]
		if v == "" {
			return "", fmt.Errorf("header %q missing", name)
		}
		return v, nil
	}
}

// IntHeader returns a ValueFunc that reads header name as a base-10
// integer and returns it in canonical form ("007" → "7"); a missing or
// non-integer header is an error, so a garbage value is dead-lettered
// instead of compared.
func IntHeader(name string) ValueFunc {
	return func(m *Message) (string, error) {
		n, err := strconv.ParseInt(m.Headers[name], 10, 64)
		if err != nil {
			return "", fmt.Errorf("header %q: %w", name, err)
		}
		return strconv.FormatInt(n, 10), nil
	}
}

// IntGreater is a compare function for MetadataOptions.Compare: it accepts
// new when both values are base-10 integers and new > old (Spring's
// compareValues example: accept a line number above the stored one). A value
// that does not parse is never accepted.
func IntGreater(old, new string) bool {
	o, err1 := strconv.ParseInt(old, 10, 64)
	n, err2 := strconv.ParseInt(new, 10, 64)
	return err1 == nil && err2 == nil && n > o
}

// MetadataOptions configure a MetadataSelector.
type MetadataOptions struct {
	// Key derives the metadata key (a file name, a stream, a partition);
	// nil means m.IdempotencyKey(), Spring's default (the message id).
	Key KeyFunc
	// Value derives the value to store; nil means TimestampValue.
	Value ValueFunc
	// Compare, when set, is Spring's compareValues: a message whose key
	// already has a value is accepted when Compare(stored, value) is true,
	// and its value then replaces the stored one with compare-and-set.
	// nil: a message is accepted only when its key has no value yet
	// (put-if-absent).
	Compare func(old, new string) bool
	// Logger receives warnings (an undo that could not be done); nil is
	// silent.
	Logger *slog.Logger
}

// MetadataSelector is Spring Integration's MetadataStoreSelector: it keeps
// one value per key in a metadata.Store and accepts a message when its
// value is new for its key.
//
// Without Compare, a message is accepted if and only if PutIfAbsent stored
// its value (the first value per key wins; later ones are duplicates).
// With Compare, a message whose key has a value is accepted when
// Compare(stored, value) holds, and the stored value is replaced with
// compare-and-set; when another consumer moved the value in between, the
// selector re-reads it and decides again, so of several consumers racing
// with the same value exactly one is accepted, and a value is never moved
// backwards.
//
// Settlement: Completed keeps the stored value. Failed and Abandoned undo
// this delivery's write — the previous value is put back with
// compare-and-set, or, when there was none, the key is removed (stores
// implementing metadata.Remover, as all of package metadata do) — so the
// redelivery is judged as if the failed attempt never happened. An undo is
// skipped when someone stored a newer value meanwhile (counted in
// MetadataStats.UndoSuperseded).
//
// A message is judged only against settled values: when the stored value
// was written by a delivery still in flight through this selector, the
// message is deferred (requeued) — neither rejected against work that may
// still fail, nor accepted past it (which would make that work's undo
// impossible). Within one process, a key's messages therefore run one at a
// time.
//
// Limits: with Compare the store holds a high-water mark, not a set, so
// values below it are rejected even if they were never processed. That is
// the intended semantics for ordered input (a file's lines, a partition's
// offsets). Selectors in different processes do not see each other's
// in-flight values: give each key one consumer process (for example
// RabbitMQ's single active consumer), or a delivery that fails after
// another process accepted a later value of its key is rejected as old on
// redelivery.
//
// A MetadataSelector is safe for concurrent use.
type MetadataSelector struct {
	store   metadata.Store
	remover metadata.Remover // nil when the store cannot delete
	key     KeyFunc
	value   ValueFunc
	compare func(old, new string) bool
	log     *slog.Logger

	mu      sync.Mutex
	pending map[pendingValue]int // values written by unsettled deliveries

	stats metadataCounters
}

type pendingValue struct{ key, value string }

type metadataCounters struct {
	accepted, rejected, deferred, casRetries, undone, undoSuperseded, errors atomic.Uint64
}

// MetadataStats are a MetadataSelector's counters.
type MetadataStats struct {
	// Accepted, Rejected and Deferred count Select decisions.
	Accepted, Rejected, Deferred uint64
	// CASRetries counts replaces lost to a concurrent writer and decided
	// again after re-reading.
	CASRetries uint64
	// Undone counts writes undone after a failed or abandoned delivery.
	Undone uint64
	// UndoSuperseded counts undos skipped because a newer value was stored
	// meanwhile, or impossible because the store cannot delete.
	UndoSuperseded uint64
	// Errors counts store errors.
	Errors uint64
}

// NewMetadataSelector returns a selector over store. A nil store
// (including a nil pointer in the interface, as an unchecked metadata.Open
// error leaves it) is an error wrapping ErrConfig.
func NewMetadataSelector(store metadata.Store, o MetadataOptions) (*MetadataSelector, error) {
	if nilcheck.IsNil(store) {
		return nil, fmt.Errorf("%w: nil metadata store (was an error from opening it ignored?)", ErrConfig)
	}
	s := &MetadataSelector{store: store, key: o.Key, value: o.Value, compare: o.Compare,
		log: orDiscard(o.Logger), pending: make(map[pendingValue]int)}
	s.remover, _ = store.(metadata.Remover)
	if s.key == nil {
		s.key = func(m *Message) (string, error) { return m.IdempotencyKey(), nil }
	}
	if s.value == nil {
		s.value = TimestampValue
	}
	return s, nil
}

// Name returns "metadata".
func (s *MetadataSelector) Name() string { return "metadata" }

// Stats returns the selector's counters.
func (s *MetadataSelector) Stats() MetadataStats {
	return MetadataStats{
		Accepted: s.stats.accepted.Load(), Rejected: s.stats.rejected.Load(), Deferred: s.stats.deferred.Load(),
		CASRetries: s.stats.casRetries.Load(), Undone: s.stats.undone.Load(),
		UndoSuperseded: s.stats.undoSuperseded.Load(), Errors: s.stats.errors.Load(),
	}
}

func (s *MetadataSelector) addPending(p pendingValue, d int) {
	s.mu.Lock()
	if n := s.pending[p] + d; n > 0 {
		s.pending[p] = n
	} else {
		delete(s.pending, p)
	}
	s.mu.Unlock()
}

// pendingElsewhere reports whether another unsettled delivery through this
// selector wrote stored under key. own is this delivery's value, which is
// registered too.
func (s *MetadataSelector) pendingElsewhere(key, stored, own string) bool {
	s.mu.Lock()
	n := s.pending[pendingValue{key, stored}]
	s.mu.Unlock()
	if stored == own {
		n--
	}
	return n > 0
}

func (s *MetadataSelector) storeErr(op string, err error) error {
	s.stats.errors.Add(1)
	if errors.Is(err, metadata.ErrInvalidKey) || errors.Is(err, metadata.ErrInvalidValue) {
		return fmt.Errorf("%w: metadata selector %s: %w", ErrBadKey, op, err)
	}
	return fmt.Errorf("metadata selector %s: %w", op, err) // err names its package
}

// Select decides about m (see MetadataSelector).
func (s *MetadataSelector) Select(ctx context.Context, m *Message) (Decision, error) {
	key, err := s.key(m)
	if err == nil && key == "" {
		err = errors.New("empty key")
	}
	if err != nil {
		return Decision{}, fmt.Errorf("%w: metadata key: %w", ErrBadKey, err)
	}
	value, err := s.value(m)
	if err != nil {
		return Decision{}, fmt.Errorf("%w: metadata value: %w", ErrBadKey, err)
	}
	// Registered before the write, so a concurrent delivery that reads
	// this value can tell it is not settled yet.
	p := pendingValue{key, value}
	s.addPending(p, 1)
	d, err := s.decide(ctx, key, value)
	if err != nil || d.Verdict != Accept {
		s.addPending(p, -1)
	}
	if err != nil {
		return Decision{}, err
	}
	switch d.Verdict {
	case Accept:
		s.stats.accepted.Add(1)
	case Reject:
		s.stats.rejected.Add(1)
	default:
		s.stats.deferred.Add(1)
	}
	return d, nil
}

func (s *MetadataSelector) decide(ctx context.Context, key, value string) (Decision, error) {
	prev, stored, err := s.store.PutIfAbsent(ctx, key, value)
	for {
		if err != nil {
			return Decision{}, s.storeErr("put-if-absent", err)
		}
		if stored {
			return s.accept(key, value, "", false, "stored"), nil
		}
		if s.pendingElsewhere(key, prev, value) {
			return Decision{Verdict: Defer, Reason: "in-flight", Detail: "in-flight"}, nil
		}
		if s.compare == nil || !s.compare(prev, value) {
			detail := "not-newer"
			if s.compare == nil {
				detail = "exists"
			}
			return Decision{Verdict: Reject, Reason: "metadata", Detail: detail}, nil
		}
		var replaced bool
		replaced, err = s.store.Replace(ctx, key, prev, value)
		if err != nil {
			return Decision{}, s.storeErr("replace", err)
		}
		if replaced {
			return s.accept(key, value, prev, true, "replaced"), nil
		}
		// Lost the race: someone moved the value since we read it.
		// Re-read and decide again against the newer value.
		s.stats.casRetries.Add(1)
		if err := ctx.Err(); err != nil {
			return Decision{}, err
		}
		var found bool
		prev, found, err = s.store.Get(ctx, key)
		if err != nil {
			return Decision{}, s.storeErr("get", err)
		}
		if !found { // removed meanwhile (an undo): start over
			prev, stored, err = s.store.PutIfAbsent(ctx, key, value)
		}
	}
}

// accept builds the Accept decision whose Settle keeps the write on
// Completed and undoes it otherwise.
func (s *MetadataSelector) accept(key, value, prev string, replaced bool, detail string) Decision {
	return Decision{Verdict: Accept, Reason: "new", Detail: detail,
		Settle: func(ctx context.Context, st Settlement) error {
			defer s.addPending(pendingValue{key, value}, -1)
			if st == Completed {
				return nil
			}
			return s.undo(ctx, key, value, prev, replaced)
		}}
}

func (s *MetadataSelector) undo(ctx context.Context, key, value, prev string, replaced bool) error {
	var (
		ok  bool
		err error
	)
	switch {
	case replaced:
		ok, err = s.store.Replace(ctx, key, value, prev)
	case s.remover != nil:
		ok, err = s.remover.Remove(ctx, key, value)
	default:
		s.stats.undoSuperseded.Add(1)
		s.log.Warn("receiver: metadata store cannot remove a key; the failed delivery's value stays",
			"key", logKey(key), "value", logKey(value))
		return nil
	}
	if err != nil {
		return s.storeErr("undo", err)
	}
	if ok {
		s.stats.undone.Add(1)
	} else {
		s.stats.undoSuperseded.Add(1)
		s.log.Warn("receiver: metadata value moved on before a failed delivery's undo; left as is",
			"key", logKey(key), "value", logKey(value))
	}
	return nil
}
