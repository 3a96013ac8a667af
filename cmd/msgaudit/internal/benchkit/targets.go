package benchkit

import (
	"fmt"
	"math/bits"
	"strings"

	"github.com/acemq/msgaudit/audit"
	"github.com/acemq/msgaudit/msgid"
	lru "github.com/hashicorp/golang-lru/v2"
	"github.com/hashicorp/golang-lru/v2/simplelru"
)

// Target is one implementation under test, built for one workload.
type Target interface {
	// Pass checks ops in order and returns how many were judged
	// duplicates. The loop lives in the implementation so that the timed
	// path has no per-op interface call.
	Pass(ops []Op) int
}

// ConcurrentTarget is a Target safe for concurrent use; Check checks one op.
type ConcurrentTarget interface {
	Target
	Check(op *Op) bool
}

// Kind groups implementations in reports.
type Kind string

// The kinds of implementation.
const (
	Ours     Kind = "ours"
	Baseline Kind = "baseline"
	Floor    Kind = "floor"
	Java     Kind = "java"
)

// Impl is one implementation the matrix can run.
type Impl struct {
	// Name is the impl= value in benchmark names.
	Name string
	Kind Kind
	// Concurrent reports whether the targets are safe for concurrent use.
	Concurrent bool
	// Exact reports whether the verdicts must match the workload's
	// expected duplicate count (floors skip that check: they do not slide).
	Exact bool
	// Doc says what the implementation is, for reports.
	Doc string
	// New builds an empty target sized for o (Depth, Producers, Keys).
	New func(o *Ops) (Target, error)
}

// Impls lists every Go implementation in report order.
var Impls = []Impl{
	{Name: "audit", Kind: Ours, Exact: true, Doc: "audit.Audit, unsynchronized", New: newAudit},
	{Name: "locked", Kind: Ours, Concurrent: true, Exact: true, Doc: "audit.Locked, one mutex", New: newLocked},
	{Name: "sharded", Kind: Ours, Concurrent: true, Exact: true, Doc: "audit.Sharded, default shards", New: newSharded},
	{Name: "connaudit", Kind: Ours, Concurrent: true, Exact: true, Doc: "connaudit.Audit, one consumer, one queue", New: newConnAudit},
	{Name: "map", Kind: Baseline, Exact: true, Doc: "map[string]struct{} of full ids, trimmed to the window per producer", New: newMapTarget},
	{Name: "lru", Kind: Baseline, Exact: true, Doc: "golang-lru/v2 simplelru keyed by full id, capacity producers*depth", New: newLRUTarget},
	{Name: "lru-locked", Kind: Baseline, Concurrent: true, Exact: true, Doc: "golang-lru/v2 lru.Cache (mutex) keyed by full id, capacity producers*depth", New: newLockedLRUTarget},
	{Name: "floor-bit", Kind: Floor, Doc: "bare bit test-and-set at an index precomputed from producer and seq", New: newFloorBit},
	{Name: "floor-map", Kind: Floor, Doc: "map lookup of the pre-split producer key, then the bit test-and-set", New: newFloorMap},
	{Name: "floor-parse", Kind: Floor, Doc: "floor-map plus parsing the id string (msgid.Split): the floor for a string id", New: newFloorParse},
}

// LookupImpl returns the implementation called name.
func LookupImpl(name string) (Impl, bool) {
	for _, im := range Impls {
		if im.Name == name {
			return im, true
		}
	}
	return Impl{}, false
}

func auditOptions(o *Ops) audit.Options {
	return audit.Options{Depth: o.Depth, MaxProducers: o.Producers}
}

type auditTarget struct{ a *audit.Audit }

func newAudit(o *Ops) (Target, error) {
	a, err := audit.New(auditOptions(o))
	return auditTarget{a}, err
}

func (t auditTarget) Pass(ops []Op) int {
	n := 0
	for i := range ops {
		if v, _ := t.a.Check(ops[i].ID); v == audit.Duplicate {
			n++
		}
	}
	return n
}

type lockedTarget struct{ a *audit.Locked }

func newLocked(o *Ops) (Target, error) {
	a, err := audit.NewLocked(auditOptions(o))
	return lockedTarget{a}, err
}

func (t lockedTarget) Pass(ops []Op) int {
	n := 0
	for i := range ops {
		if v, _ := t.a.Check(ops[i].ID); v == audit.Duplicate {
			n++
		}
	}
	return n
}

func (t lockedTarget) Check(op *Op) bool {
	v, _ := t.a.Check(op.ID)
	return v == audit.Duplicate
}

type shardedTarget struct{ a *audit.Sharded }

// ShardedShards is the shard count of the sharded target: 0, the default,
// is audit.NewSharded's own default (bench's -shards flag sets it).
var ShardedShards int

func newSharded(o *Ops) (Target, error) {
	a, err := audit.NewSharded(auditOptions(o), ShardedShards)
	return shardedTarget{a}, err
}

func (t shardedTarget) Pass(ops []Op) int {
	n := 0
	for i := range ops {
		if v, _ := t.a.Check(ops[i].ID); v == audit.Duplicate {
			n++
		}
	}
	return n
}

func (t shardedTarget) Check(op *Op) bool {
	v, _ := t.a.Check(op.ID)
	return v == audit.Duplicate
}

// mapTarget is the exact baseline a user writes by hand: a set of full id
// strings, with each producer's ids dropped once they fall Depth below that
// producer's highest sequence (so it remembers what the audit remembers,
// without a producer cap). Ids below the window are answered "new", like a
// forgotten id.
type mapTarget struct {
	seen  map[string]struct{}
	prods map[string]*idQueue
	depth uint64
}

// idQueue is a producer's ids in arrival order, for trimming.
type idQueue struct {
	max  uint64
	head int
	q    []queued
}

type queued struct {
	id  string
	seq uint64
}

func newMapTarget(o *Ops) (Target, error) {
	return &mapTarget{seen: map[string]struct{}{}, prods: map[string]*idQueue{}, depth: uint64(o.Depth)}, nil
}

func (t *mapTarget) Pass(ops []Op) int {
	n := 0
	for i := range ops {
		if t.check(ops[i].ID) {
			n++
		}
	}
	return n
}

func (t *mapTarget) check(id string) bool {
	key, seq, err := msgid.Split(id)
	if err != nil {
		return false
	}
	w := t.prods[key]
	if w == nil {
		w = &idQueue{}
		t.prods[key] = w
	}
	if _, ok := t.seen[id]; ok {
		return true
	}
	if seq+t.depth < w.max {
		return false // below the window: forgotten
	}
	t.seen[id] = struct{}{}
	w.q = append(w.q, queued{id, seq})
	if seq > w.max {
		w.max = seq
		for w.head < len(w.q) && w.q[w.head].seq+t.depth < w.max {
			delete(t.seen, w.q[w.head].id)
			w.q[w.head] = queued{}
			w.head++
		}
		if w.head > len(w.q)/2 {
			k := copy(w.q, w.q[w.head:])
			clear(w.q[k:])
			w.q = w.q[:k]
			w.head = 0
		}
	}
	return false
}

type lruTarget struct {
	l *simplelru.LRU[string, struct{}]
}

func lruCapacity(o *Ops) int {
	return o.Producers * o.Depth
}

func newLRUTarget(o *Ops) (Target, error) {
	l, err := simplelru.NewLRU[string, struct{}](lruCapacity(o), nil)
	return lruTarget{l}, err
}

func (t lruTarget) Pass(ops []Op) int {
	n := 0
	for i := range ops {
		if _, ok := t.l.Get(ops[i].ID); ok {
			n++
		} else {
			t.l.Add(ops[i].ID, struct{}{})
		}
	}
	return n
}

type lockedLRUTarget struct{ l *lru.Cache[string, struct{}] }

func newLockedLRUTarget(o *Ops) (Target, error) {
	l, err := lru.New[string, struct{}](lruCapacity(o))
	return lockedLRUTarget{l}, err
}

func (t lockedLRUTarget) Pass(ops []Op) int {
	n := 0
	for i := range ops {
		if ok, _ := t.l.ContainsOrAdd(ops[i].ID, struct{}{}); ok {
			n++
		}
	}
	return n
}

func (t lockedLRUTarget) Check(op *Op) bool {
	ok, _ := t.l.ContainsOrAdd(op.ID, struct{}{})
	return ok
}

// floorShift returns log2 of the bits per producer of the floor targets:
// the depth rounded up to a power of two, at least 64.
func floorShift(depth int) uint {
	return uint(bits.Len(uint(max(depth, 64) - 1)))
}

// floorBit is the limit of the design: a test-and-set of one bit at an
// index computed with a shift and a mask from the pre-parsed producer and
// sequence. No parsing, no lookup, no window logic.
type floorBit struct {
	bits  []uint64
	shift uint
	mask  uint64
}

func newFloorBit(o *Ops) (Target, error) {
	s := floorShift(o.Depth)
	return &floorBit{bits: make([]uint64, (o.Keys<<s)/64), shift: s, mask: 1<<s - 1}, nil
}

func (t *floorBit) Pass(ops []Op) int {
	n := 0
	for i := range ops {
		idx := uint64(ops[i].P)<<t.shift | ops[i].Seq&t.mask
		w := &t.bits[idx>>6]
		m := uint64(1) << (idx & 63)
		if *w&m != 0 {
			n++
		}
		*w |= m
	}
	return n
}

// floorMap adds the producer lookup to floorBit: a map from the pre-split
// producer key to that producer's bits.
type floorMap struct {
	m    map[string][]uint64
	mask uint64
	word int
}

func newFloorMap(o *Ops) (Target, error) {
	s := floorShift(o.Depth)
	return &floorMap{m: make(map[string][]uint64, o.Keys), mask: 1<<s - 1, word: 1 << s / 64}, nil
}

func (t *floorMap) Pass(ops []Op) int {
	n := 0
	for i := range ops {
		b, ok := t.m[ops[i].Key]
		if !ok {
			b = make([]uint64, t.word)
			t.m[ops[i].Key] = b
		}
		idx := ops[i].Seq & t.mask
		w := &b[idx>>6]
		m := uint64(1) << (idx & 63)
		if *w&m != 0 {
			n++
		}
		*w |= m
	}
	return n
}

// floorParse is floorMap on the id string: msgid.Split, then the lookup
// and the bit. What the audit adds beyond it is the LRU and the window.
type floorParse struct{ floorMap }

func newFloorParse(o *Ops) (Target, error) {
	s := floorShift(o.Depth)
	return &floorParse{floorMap{m: make(map[string][]uint64, o.Keys), mask: 1<<s - 1, word: 1 << s / 64}}, nil
}

func (t *floorParse) Pass(ops []Op) int {
	n := 0
	for i := range ops {
		key, seq, err := msgid.Split(ops[i].ID)
		if err != nil {
			continue
		}
		b, ok := t.m[key]
		if !ok {
			b = make([]uint64, t.word)
			t.m[strings.Clone(key)] = b
		}
		idx := seq & t.mask
		w := &b[idx>>6]
		m := uint64(1) << (idx & 63)
		if *w&m != 0 {
			n++
		}
		*w |= m
	}
	return n
}

// Compile-time checks of which targets are concurrent.
var (
	_ ConcurrentTarget = lockedTarget{}
	_ ConcurrentTarget = shardedTarget{}
	_ ConcurrentTarget = lockedLRUTarget{}
)

// newTarget builds impl's target for o and runs its warm-up and priming ops.
func newTarget(im Impl, o *Ops) (Target, error) {
	t, err := im.New(o)
	if err != nil {
		return nil, fmt.Errorf("benchkit: %s: %w", im.Name, err)
	}
	t.Pass(o.Warm)
	t.Pass(o.Prime)
	return t, nil
}
