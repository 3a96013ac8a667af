package audit

import (
	"fmt"
	"sync"
	"testing"

	"pgregory.net/rapid"

	"github.com/acemq/msgaudit/internal/testkit/testwait"
)

// checkDirectory reports where the directory and the shards disagree: every
// tracked producer must be recorded in its shard, with the right counts, and
// nothing else may be recorded. Call it with no operation running.
func checkDirectory(s *Sharded) error {
	d := s.dir
	d.mu.Lock()
	defer d.mu.Unlock()
	s.lockAll()
	defer s.unlockAll()
	refs := make(map[uint64]int32)
	shardOf := make(map[uint64]int)
	for i := range s.shards {
		keys := s.shards[i].a.lru.Keys()
		if int(d.load[i]) != len(keys) {
			return fmt.Errorf("shard %d holds %d producers, the directory counts %d", i, len(keys), d.load[i])
		}
		for _, key := range keys {
			f := fingerprint(s.hs.sample(key))
			if j, ok := d.lookup(f); !ok || int(j) != i {
				return fmt.Errorf("%s is in shard %d, the directory says %d (%v)", key, i, j, ok)
			}
			if j, ok := shardOf[f]; ok && j != i {
				return fmt.Errorf("keys of one fingerprint in shards %d and %d", j, i)
			}
			shardOf[f] = i
			refs[f]++
		}
	}
	t := d.tab.Load()
	n := 0
	for i := range t.fps {
		f := t.fps[i].Load()
		if f == 0 {
			continue
		}
		n++
		if t.refs[i] != refs[f] {
			return fmt.Errorf("fingerprint %#x counted %d times, %d producers have it", f, t.refs[i], refs[f])
		}
	}
	if n != len(refs) || n != d.n {
		return fmt.Errorf("the directory has %d entries (n = %d), the shards %d fingerprints", n, d.n, len(refs))
	}
	return nil
}

// TestShardedPlacement checks the point of the directory: while shards
// outnumber producers, no two producers share a shard, also after churn.
// Hashed to shards, 64 producers over 256 shards share about 8.
func TestShardedPlacement(t *testing.T) {
	s, err := NewSharded(Options{}, 0) // cap 64, 256 shards
	if err != nil {
		t.Fatal(err)
	}
	key := func(p int) string { return fmt.Sprintf("ID:host-41234-1700000000000-1:1:1:%d", p) }
	for round := range 3 {
		for p := range 64 {
			s.CheckKey(key(round*50+p), 1) // rounds overlap: churn
		}
		for i := range s.shards {
			if n := s.shards[i].a.lru.Len(); n > 1 {
				t.Fatalf("round %d: shard %d holds %d producers", round, i, n)
			}
		}
		if err := checkDirectory(s); err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
	}
}

// TestDirectoryModel runs random operations that add and remove producers,
// with keys that share fingerprints or not, and few or many shards, and
// checks that the directory agrees with the shards after each.
func TestDirectoryModel(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		shards := rapid.SampledFrom([]int{2, 4, 64}).Draw(t, "shards")
		s, err := NewSharded(Options{Depth: 64, MaxProducers: rapid.IntRange(1, 12).Draw(t, "cap")}, shards)
		if err != nil {
			t.Fatal(err)
		}
		format := rapid.SampledFrom(keyFormats).Draw(t, "format")
		for step := range rapid.IntRange(1, 80).Draw(t, "steps") {
			key := fmt.Sprintf(format, rapid.IntRange(0, 20).Draw(t, "producer"))
			seq := rapid.Uint64Range(1, 200).Draw(t, "seq")
			switch rapid.IntRange(0, 9).Draw(t, "op") {
			case 0:
				if err := s.SetMaxProducers(rapid.IntRange(1, 12).Draw(t, "new cap")); err != nil {
					t.Fatal(err)
				}
			case 1:
				if rapid.IntRange(0, 3).Draw(t, "clear") == 0 {
					s.Clear()
				}
			case 2:
				b, err := s.MarshalBinary()
				if err != nil {
					t.Fatal(err)
				}
				if err := s.UnmarshalBinary(b); err != nil {
					t.Fatal(err)
				}
			case 3:
				s.RollbackKey(key, seq)
			case 4:
				if _, err := s.Check(fmt.Sprintf("%s:%d", key, seq)); err != nil {
					t.Fatal(err)
				}
			default:
				s.CheckKey(key, seq)
			}
			if err := checkDirectory(s); err != nil {
				t.Fatalf("step %d: %v", step, err)
			}
		}
	})
}

// TestDirectoryConcurrent churns producers from several goroutines (more
// producers than the cap, rollbacks, reads, now and then a Clear) and then
// checks the directory; -race checks the lock-free reads.
func TestDirectoryConcurrent(t *testing.T) {
	s, err := NewSharded(Options{Depth: 64, MaxProducers: 16}, 0)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			for i := range 3000 {
				key := fmt.Sprintf("ID:host-%d-1700000000000-1:1:1:%d", g%2, i%40)
				switch i % 50 {
				case 7:
					s.RollbackKey(key, uint64(i))
				case 13:
					s.LastSeq(key)
				case 29:
					if _, err := s.IsInOrder(fmt.Sprintf("%s:%d", key, i)); err != nil {
						t.Error(err)
					}
				case 31:
					if g == 0 && i%1000 == 31 {
						s.Clear()
					}
				default:
					if _, err := s.Check(fmt.Sprintf("%s:%d", key, i)); err != nil {
						t.Error(err)
					}
				}
			}
		})
	}
	testwait.Group(t, &wg, testwait.Long, "the end of the 4 churning goroutines")
	if err := checkDirectory(s); err != nil {
		t.Fatal(err)
	}
	if n := s.Len(); n > 16 {
		t.Fatalf("%d producers tracked, cap 16", n)
	}
}
