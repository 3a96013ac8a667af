// Package audittest holds a reference model of the message audit for
// tests: the set of (producer, sequence) pairs recorded and not rolled
// back, and each producer's highest accepted sequence. It checks the
// sightings of any audit (audit.Audit, Locked, Sharded, connaudit) against
// the guarantees the audit makes while a producer stays tracked:
//
//   - no false duplicate: Duplicate only for a pair recorded and not rolled
//     back;
//   - no missed duplicate: a recorded pair is never FirstSeen again, and is
//     Duplicate whenever it lies within Depth of the producer's highest
//     sequence;
//   - TooOld only below that window.
//
// A Model is not safe for concurrent use.
package audittest

import (
	"fmt"

	"github.com/acemq/msgaudit/bitsetbin"
)

// Model is the reference model. Create it with NewModel.
type Model struct {
	depth uint64
	prods map[string]*producer
}

type producer struct {
	marked map[uint64]bool
	hi     uint64
}

// NewModel returns an empty model for audits of the given (requested)
// window depth. The audit's guaranteed depth may be larger; the model only
// relies on depth.
func NewModel(depth int) *Model {
	return &Model{depth: uint64(depth), prods: make(map[string]*producer)}
}

// Check verifies the sighting got for (key, seq) against the model and
// records it. It returns a descriptive error on a violation.
func (m *Model) Check(key string, seq uint64, got bitsetbin.Sighting) error {
	p := m.prods[key]
	if p == nil {
		p = &producer{marked: make(map[uint64]bool)}
		m.prods[key] = p
	}
	hi := max(p.hi, seq)
	exact := seq >= hi || hi-seq <= m.depth
	switch got {
	case bitsetbin.Duplicate:
		if !p.marked[seq] {
			return fmt.Errorf("false duplicate: %s:%d was never recorded (or was rolled back)", key, seq)
		}
	case bitsetbin.FirstSeen:
		if p.marked[seq] {
			return fmt.Errorf("missed duplicate: %s:%d recorded before, got new", key, seq)
		}
		p.marked[seq] = true
	case bitsetbin.TooOld:
		if exact {
			return fmt.Errorf("too-old within the window: %s:%d, highest %d, depth %d", key, seq, hi, m.depth)
		}
		return nil
	default:
		return fmt.Errorf("invalid sighting %d for %s:%d", got, key, seq)
	}
	p.hi = hi
	return nil
}

// Exact reports whether the audit must classify (key, seq) exactly now:
// the producer is known and seq is within depth of its highest sequence
// (or above it).
func (m *Model) Exact(key string, seq uint64) bool {
	p := m.prods[key]
	if p == nil {
		return true
	}
	return seq >= p.hi || p.hi-seq <= m.depth
}

// Marked reports whether (key, seq) is recorded and not rolled back.
func (m *Model) Marked(key string, seq uint64) bool {
	p := m.prods[key]
	return p != nil && p.marked[seq]
}

// Rollback forgets (key, seq), as a successful or no-op rollback does.
func (m *Model) Rollback(key string, seq uint64) {
	if p := m.prods[key]; p != nil {
		delete(p.marked, seq)
	}
}

// LastSeq verifies an audit's LastSeq answer for key: a reported sequence
// must be recorded, and must be the model's highest recorded sequence when
// that one is within the window.
func (m *Model) LastSeq(key string, got uint64, ok bool) error {
	p := m.prods[key]
	var top uint64
	var has bool
	if p != nil {
		for s := range p.marked {
			if !has || s > top {
				top, has = s, true
			}
		}
	}
	if ok && (p == nil || !p.marked[got]) {
		return fmt.Errorf("LastSeq(%s) = %d, which is not recorded", key, got)
	}
	if has && m.Exact(key, top) && (!ok || got != top) {
		return fmt.Errorf("LastSeq(%s) = %d, %v; want %d", key, got, ok, top)
	}
	return nil
}

// Forget drops a producer, as an eviction does.
func (m *Model) Forget(key string) { delete(m.prods, key) }

// Clear drops every producer.
func (m *Model) Clear() { clear(m.prods) }

// Known reports whether the model has a producer key.
func (m *Model) Known(key string) bool { return m.prods[key] != nil }

// Len returns the number of producers in the model.
func (m *Model) Len() int { return len(m.prods) }
