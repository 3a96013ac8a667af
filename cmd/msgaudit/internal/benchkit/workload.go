package benchkit

import (
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
)

// KeyPrefix starts every producer key of the benchmark workloads: an
// OpenWire connection id, session 1, producer id. The Java program
// cmd/msgaudit/internal/bench/java/AuditBench.java builds its ids from the same prefix.
const KeyPrefix = "ID:host-41234-1700000000000-1:1:1:"

// TotalIDs is how many ids one pass of a workload checks, spread evenly
// over the producers: producer p gets Rounds(P) = max(1, TotalIDs/P)
// sequence numbers.
const TotalIDs = 1 << 18

// ReplayLen is how many of each producer's last ids the replay workload
// checks again (fewer when the depth or the rounds are smaller).
const ReplayLen = 1000

// ProducerKey returns the key of producer p (1-based):
// "ID:host-41234-1700000000000-1:1:1:<p>".
func ProducerKey(p int) string { return KeyPrefix + strconv.Itoa(p) }

// ID returns the id of producer p's message seq: "<ProducerKey(p)>:<seq>".
func ID(p int, seq uint64) string { return ProducerKey(p) + ":" + strconv.FormatUint(seq, 10) }

// Rounds returns how many sequence numbers each of producers gets in one
// pass: max(1, TotalIDs/producers).
func Rounds(producers int) int { return max(1, TotalIDs/producers) }

// Workload names a way of ordering ids.
type Workload string

// The workloads. Every workload is round-robin over the producers: op i
// belongs to producer i mod P (1-based: p = i%P + 1). Only the sequence
// numbers differ.
const (
	// InOrder: producer p's n-th op has seq n (1..Rounds). All new.
	InOrder Workload = "inorder"
	// Replay: the audit is first fed the whole InOrder pass (untimed),
	// then the op stream is the last K = min(ReplayLen, depth, Rounds)
	// seqs of every producer again. All duplicates.
	Replay Workload = "replay"
	// OutOfOrder: InOrder with the seqs of each producer shuffled inside
	// consecutive blocks of B = min(depth, 1024) seqs, so every seq is
	// within the window of the highest seen. All new.
	OutOfOrder Workload = "outoforder"
	// Churn: twice as many producers as the audit tracks (2P keys,
	// round-robin, cap P), so every op evicts the least recently used
	// producer and creates a new one. All new (the producer is forgotten).
	Churn Workload = "churn"
	// Jumps: each producer's seq grows by 1, except that one op in 16 jumps
	// ahead by a gap drawn uniformly from [depth, 4*depth], which slides the
	// whole window. All new.
	Jumps Workload = "jumps"
)

// Workloads lists every workload in a stable order.
var Workloads = []Workload{InOrder, Replay, OutOfOrder, Churn, Jumps}

// Op is one pre-built check: the full id string plus what the floor and
// baseline implementations need precomputed (producer index, key, seq).
type Op struct {
	ID   string
	Key  string // substring of ID: no separate allocation
	P    int32  // 0-based producer index
	Seq  uint64
	Want uint8 // expected verdict: 0 new, 1 duplicate
}

// Ops is a pre-built workload: Prime is checked untimed before the timed
// Ops; Warm creates every producer untimed (seq 0) before a pass of Ops.
type Ops struct {
	Workload  Workload
	Depth     int
	Producers int // producers the audit tracks (the cap)
	Keys      int // distinct producer keys in Ops (2*Producers for Churn)
	Warm      []Op
	Prime     []Op
	Ops       []Op
	// Repeatable reports whether Ops can be checked again on the same
	// state with the same verdicts (replay); otherwise a new pass needs a
	// fresh audit (plus Warm and Prime).
	Repeatable bool
}

func mkOp(p int, seq uint64, want uint8) Op {
	// One allocation per id: build it in a stack buffer, then one string.
	var buf [96]byte
	b := append(buf[:0], KeyPrefix...)
	b = strconv.AppendInt(b, int64(p), 10)
	k := len(b)
	b = append(b, ':')
	b = strconv.AppendUint(b, seq, 10)
	id := string(b)
	return Op{ID: id, Key: id[:k], P: int32(p - 1), Seq: seq, Want: want}
}

type cacheKey struct {
	w        Workload
	depth, p int
}

// cacheSize is how many built workloads Build keeps: a pre-built workload
// is tens of megabytes, and the matrix is ordered so that consecutive
// cases share one.
const cacheSize = 3

var (
	cacheMu    sync.Mutex
	cache      = map[cacheKey]*Ops{}
	cacheOrder []cacheKey // least recently used first
)

// Build returns the workload w for depth and producers, building it on
// first use and sharing it afterwards (it is read-only). The random
// workloads use a fixed seed, so every run checks the same ids.
func Build(w Workload, depth, producers int) (*Ops, error) {
	if depth < 1 || producers < 1 {
		return nil, fmt.Errorf("benchkit: depth %d and producers %d must be >= 1", depth, producers)
	}
	k := cacheKey{w, depth, producers}
	cacheMu.Lock()
	defer cacheMu.Unlock()
	touch := func() {
		for i, c := range cacheOrder {
			if c == k {
				cacheOrder = append(cacheOrder[:i], cacheOrder[i+1:]...)
				break
			}
		}
		cacheOrder = append(cacheOrder, k)
	}
	if o, ok := cache[k]; ok {
		touch()
		return o, nil
	}
	o, err := build(w, depth, producers, TotalIDs)
	if err != nil {
		return nil, err
	}
	if len(cacheOrder) == cacheSize {
		delete(cache, cacheOrder[0])
		cacheOrder = cacheOrder[1:]
	}
	cache[k] = o
	touch()
	return o, nil
}

// ResetCache drops every built workload so its memory can be reclaimed.
func ResetCache() {
	cacheMu.Lock()
	clear(cache)
	cacheOrder = nil
	cacheMu.Unlock()
}

func warm(keys int) []Op {
	ops := make([]Op, keys)
	for p := 1; p <= keys; p++ {
		ops[p-1] = mkOp(p, 0, 0)
	}
	return ops
}

// build builds workload w with total ids per pass (TotalIDs outside tests).
func build(w Workload, depth, producers, total int) (*Ops, error) {
	r := max(1, total/producers)
	o := &Ops{Workload: w, Depth: depth, Producers: producers, Keys: producers}
	switch w {
	case InOrder:
		o.Warm = warm(producers)
		o.Ops = make([]Op, 0, r*producers)
		for s := 1; s <= r; s++ {
			for p := 1; p <= producers; p++ {
				o.Ops = append(o.Ops, mkOp(p, uint64(s), 0))
			}
		}
	case Replay:
		o.Warm = warm(producers)
		o.Prime = make([]Op, 0, r*producers)
		for s := 1; s <= r; s++ {
			for p := 1; p <= producers; p++ {
				o.Prime = append(o.Prime, mkOp(p, uint64(s), 0))
			}
		}
		k := min(ReplayLen, depth, r)
		o.Ops = make([]Op, 0, k*producers)
		for s := r - k + 1; s <= r; s++ {
			for p := 1; p <= producers; p++ {
				o.Ops = append(o.Ops, mkOp(p, uint64(s), 1))
			}
		}
		o.Repeatable = true
	case OutOfOrder:
		o.Warm = warm(producers)
		rng := rand.New(rand.NewPCG(1, uint64(depth)))
		block := min(depth, 1024)
		seqs := make([][]uint64, producers)
		for p := range seqs {
			s := make([]uint64, r)
			for i := range s {
				s[i] = uint64(i + 1)
			}
			for lo := 0; lo < r; lo += block {
				b := s[lo:min(lo+block, r)]
				rng.Shuffle(len(b), func(i, j int) { b[i], b[j] = b[j], b[i] })
			}
			seqs[p] = s
		}
		o.Ops = make([]Op, 0, r*producers)
		for i := range r {
			for p := 1; p <= producers; p++ {
				o.Ops = append(o.Ops, mkOp(p, seqs[p-1][i], 0))
			}
		}
	case Churn:
		keys := 2 * producers
		o.Keys = keys
		rk := max(1, total/keys)
		o.Ops = make([]Op, 0, rk*keys)
		for s := 1; s <= rk; s++ {
			for p := 1; p <= keys; p++ {
				o.Ops = append(o.Ops, mkOp(p, uint64(s), 0))
			}
		}
	case Jumps:
		o.Warm = warm(producers)
		rng := rand.New(rand.NewPCG(2, uint64(depth)))
		next := make([]uint64, producers)
		o.Ops = make([]Op, 0, r*producers)
		for range r {
			for p := 1; p <= producers; p++ {
				gap := uint64(1)
				if rng.IntN(16) == 0 {
					gap = uint64(depth) + rng.Uint64N(uint64(3*depth)+1)
				}
				next[p-1] += gap
				o.Ops = append(o.Ops, mkOp(p, next[p-1], 0))
			}
		}
	default:
		return nil, fmt.Errorf("benchkit: unknown workload %q", w)
	}
	return o, nil
}
