package audit_test

import (
	"errors"
	"fmt"
	"math"
	"testing"

	"github.com/acemq/msgaudit/audit"
	"github.com/acemq/msgaudit/audit/audittest"
	"github.com/acemq/msgaudit/msgid"
	"pgregory.net/rapid"
)

type pair struct {
	key string
	seq uint64
}

// drawSeq draws a sequence for a producer whose highest sequence is hi:
// mostly near it (inside and just below the window, or a little above),
// sometimes a huge jump.
func drawSeq(t *rapid.T, hi uint64, depth int) uint64 {
	switch rapid.IntRange(0, 30).Draw(t, "shape") {
	case 0:
		return hi + rapid.Uint64Range(1e9, 1e13).Draw(t, "jump")
	case 1:
		return math.MaxUint64 - rapid.Uint64Range(0, 200).Draw(t, "top")
	case 2:
		return rapid.Uint64().Draw(t, "any")
	}
	d := rapid.IntRange(-2*depth-300, 150).Draw(t, "delta")
	if d < 0 {
		if uint64(-d) > hi {
			return 0
		}
		return hi - uint64(-d)
	}
	if hi > math.MaxUint64-uint64(d) {
		return math.MaxUint64
	}
	return hi + uint64(d)
}

// TestPropertyAgainstModel runs random traces of check / replay / rollback
// / jump / clear / snapshot on every audit type and checks each sighting
// against the reference model: no false duplicate ever, no missed duplicate
// within the guaranteed depth while the producer is tracked (the cap is at
// least the number of producers, so none is evicted), TooOld only below the
// window.
func TestPropertyAgainstModel(t *testing.T) {
	for _, k := range kinds {
		t.Run(k.name, func(t *testing.T) {
			t.Parallel()
			rapid.Check(t, func(rt *rapid.T) { propertyTrace(rt, k) })
		})
	}
}

func propertyTrace(rt *rapid.T, k kind) {
	depth := rapid.SampledFrom([]int{1, 64, 100, 500, 2048}).Draw(rt, "depth")
	nprod := rapid.IntRange(1, 6).Draw(rt, "producers")
	o := audit.Options{Depth: depth, MaxProducers: nprod + rapid.IntRange(0, 2).Draw(rt, "spare cap")}
	a, err := k.make(o)
	if err != nil {
		rt.Fatal(err)
	}
	m := audittest.NewModel(depth)
	// Keys differ at the end, as OpenWire keys do, or only in the middle,
	// where the tables' sampled hash does not look (they collide; see
	// audit/hash.go).
	format := rapid.SampledFrom([]string{"ID:host-41234-1700000000000-1:1:1:%d", "ID:collide-host-%04d-170000000:1:1:1"}).Draw(rt, "keys")
	keys := make([]string, nprod)
	for i := range keys {
		keys[i] = fmt.Sprintf(format, i+1)
	}
	his := make(map[string]uint64)
	var history []pair
	type last struct {
		seq uint64
		has bool
	}
	inOrder := make(map[string]last) // last IsInOrder sequence per producer
	check := func(rt *rapid.T, key string, seq uint64) {
		var v audit.Sighting
		if rapid.Bool().Draw(rt, "string form") {
			var err error
			if v, err = a.Check(fmt.Sprintf("%s:%d", key, seq)); err != nil {
				rt.Fatalf("Check: %v", err)
			}
		} else {
			v = a.CheckKey(key, seq)
		}
		if err := m.Check(key, seq, v); err != nil {
			rt.Fatal(err)
		}
		if v != audit.TooOld {
			his[key] = max(his[key], seq)
		}
		history = append(history, pair{key, seq})
	}
	rt.Repeat(map[string]func(*rapid.T){
		"check": func(rt *rapid.T) {
			key := rapid.SampledFrom(keys).Draw(rt, "key")
			check(rt, key, drawSeq(rt, his[key], depth))
		},
		"replay": func(rt *rapid.T) {
			if len(history) == 0 {
				rt.Skip("no history")
			}
			p := history[rapid.IntRange(max(0, len(history)-3000), len(history)-1).Draw(rt, "replayed")]
			check(rt, p.key, p.seq)
		},
		"rollback": func(rt *rapid.T) {
			if len(history) == 0 {
				rt.Skip("no history")
			}
			p := history[rapid.IntRange(0, len(history)-1).Draw(rt, "rolled back")]
			if rapid.Bool().Draw(rt, "string form") {
				if err := a.Rollback(fmt.Sprintf("%s:%d", p.key, p.seq)); err != nil {
					rt.Fatal(err)
				}
			} else {
				a.RollbackKey(p.key, p.seq)
			}
			m.Rollback(p.key, p.seq)
		},
		"rollback unknown": func(rt *rapid.T) {
			n := a.Len()
			a.RollbackKey("nobody", rapid.Uint64().Draw(rt, "seq"))
			if a.Len() != n {
				rt.Fatal("rollback created a producer")
			}
		},
		"garbage": func(rt *rapid.T) {
			id := rapid.SampledFrom([]string{"nocolon", "p:", ":1", "p:+1", "p:01", "p:-1", "p: 1", "p:99999999999999999999"}).Draw(rt, "garbage")
			if v, err := a.Check(id); !errors.Is(err, msgid.ErrMalformed) || v != audit.TooOld {
				rt.Fatalf("Check(%q) = %v, %v", id, v, err)
			}
		},
		"last seq": func(rt *rapid.T) {
			key := rapid.SampledFrom(keys).Draw(rt, "key")
			s, ok := a.LastSeq(key)
			if err := m.LastSeq(key, s, ok); err != nil {
				rt.Fatal(err)
			}
		},
		"in order": func(rt *rapid.T) {
			key := rapid.SampledFrom(keys).Draw(rt, "key")
			seq := drawSeq(rt, his[key], depth)
			ok, err := a.IsInOrder(fmt.Sprintf("%s:%d", key, seq))
			if err != nil {
				rt.Fatal(err)
			}
			if !m.Known(key) {
				if !ok {
					rt.Fatal("IsInOrder of an unknown producer is false")
				}
				return
			}
			l := inOrder[key]
			want := !l.has || l.seq != math.MaxUint64 && seq == l.seq+1
			if ok != want {
				rt.Fatalf("IsInOrder(%s:%d) = %v, previous %+v", key, seq, ok, l)
			}
			inOrder[key] = last{seq, true}
		},
		"clear": func(rt *rapid.T) {
			a.Clear()
			m.Clear()
			clear(his)
			clear(inOrder)
			history = history[:0]
		},
		"snapshot": func(rt *rapid.T) {
			data, err := a.MarshalBinary()
			if err != nil {
				rt.Fatal(err)
			}
			// A snapshot never raises the receiving audit's limits: one
			// producer fewer is refused, and the refused audit is unchanged.
			if a.MaxProducers() > 1 {
				small, err := k.make(audit.Options{Depth: a.Depth(), MaxProducers: a.MaxProducers() - 1})
				if err != nil {
					rt.Fatal(err)
				}
				if err := small.UnmarshalBinary(data); !errors.Is(err, audit.ErrCorrupt) || small.MaxProducers() != a.MaxProducers()-1 {
					rt.Fatalf("snapshot of cap %d restored into cap %d: %v, cap now %d", a.MaxProducers(), a.MaxProducers()-1, err, small.MaxProducers())
				}
			}
			// Within them, a restore adopts the snapshot's depth and cap.
			b, err := k.make(audit.Options{Depth: 2048, MaxProducers: a.MaxProducers() + rapid.IntRange(0, 3).Draw(rt, "receiver's spare cap")})
			if err != nil {
				rt.Fatal(err)
			}
			if err := b.UnmarshalBinary(data); err != nil {
				rt.Fatal(err)
			}
			if b.Len() != a.Len() || b.Depth() != a.Depth() || b.MaxProducers() != a.MaxProducers() {
				rt.Fatalf("restored len %d depth %d max %d; want %d %d %d", b.Len(), b.Depth(), b.MaxProducers(), a.Len(), a.Depth(), a.MaxProducers())
			}
			a = b
		},
		"grow cap": func(rt *rapid.T) {
			if err := a.SetMaxProducers(a.MaxProducers() + rapid.IntRange(0, 3).Draw(rt, "more")); err != nil {
				rt.Fatal(err)
			}
		},
		"": func(rt *rapid.T) {
			if a.Len() != m.Len() {
				rt.Fatalf("Len %d, model %d", a.Len(), m.Len())
			}
			if st := a.Stats(); st.Evictions != 0 || st.Producers != m.Len() {
				rt.Fatalf("stats %+v", st)
			}
		},
	})
}
