package audit_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"runtime"
	"strings"
	"testing"

	"github.com/acemq/msgaudit/audit"
	"github.com/acemq/msgaudit/bitsetbin"
)

// fill checks seqs 1..n (n producers p0..) and rolls back every 10th.
func fill(t testing.TB, a auditor, producers, n int) {
	t.Helper()
	for p := range producers {
		key := fmt.Sprintf("ID:h-1-2-3:1:1:1:%d", p)
		for s := 1; s <= n; s++ {
			a.CheckKey(key, uint64(s*(p+1)))
			if s%10 == 0 {
				a.RollbackKey(key, uint64(s*(p+1)))
			}
		}
		if _, err := a.IsInOrder(fmt.Sprintf("%s:%d", key, 7)); err != nil {
			t.Fatal(err)
		}
	}
}

func TestSnapshotRoundTrip(t *testing.T) {
	t.Parallel()
	for _, from := range kinds {
		for _, to := range kinds {
			t.Run(from.name+"/to="+to.name, func(t *testing.T) {
				t.Parallel()
				a := mustMake(t, from, audit.Options{Depth: 300, MaxProducers: 5})
				fill(t, a, 5, 400)
				data, err := a.MarshalBinary()
				if err != nil {
					t.Fatal(err)
				}
				b := mustMake(t, to, audit.Options{MaxIDLength: 100})
				b.CheckKey("will-be-replaced", 1)
				if err := b.UnmarshalBinary(data); err != nil {
					t.Fatal(err)
				}
				if b.Len() != 5 || b.Depth() != 300 || b.MaxProducers() != 5 {
					t.Fatalf("restored len %d depth %d max %d", b.Len(), b.Depth(), b.MaxProducers())
				}
				if _, ok := b.LastSeq("will-be-replaced"); ok {
					t.Fatal("old producer survived the restore")
				}
				// Every probe gets the same sighting from both audits.
				for p := range 5 {
					key := fmt.Sprintf("ID:h-1-2-3:1:1:1:%d", p)
					if s1, ok1 := a.LastSeq(key); true {
						s2, ok2 := b.LastSeq(key)
						if s1 != s2 || ok1 != ok2 {
							t.Fatalf("LastSeq(%s): %d,%v vs %d,%v", key, s1, ok1, s2, ok2)
						}
					}
					// Both audits see the same IsInOrder record.
					o1, _ := a.IsInOrder(key + ":8")
					o2, _ := b.IsInOrder(key + ":8")
					if !o1 || !o2 {
						t.Fatalf("IsInOrder record lost: %v %v", o1, o2)
					}
					for s := uint64(0); s <= 410*uint64(p+1); s += uint64(p + 1) {
						if v1, v2 := a.CheckKey(key, s), b.CheckKey(key, s); v1 != v2 {
							t.Fatalf("%s:%d: original %v, restored %v", key, s, v1, v2)
						}
					}
				}
				{
					// LRU order survives: p0 is the least recently used.
					c := mustMake(t, to, audit.Options{})
					if err := c.UnmarshalBinary(data); err != nil {
						t.Fatal(err)
					}
					c.CheckKey("newcomer", 1)
					if _, ok := c.LastSeq("ID:h-1-2-3:1:1:1:0"); ok {
						t.Fatal("the least recently used producer was not evicted first")
					}
					if _, ok := c.LastSeq("ID:h-1-2-3:1:1:1:1"); !ok {
						t.Fatal("the second producer was evicted")
					}
				}
			})
		}
	}
}

func TestSnapshotEmpty(t *testing.T) {
	t.Parallel()
	forEachKind(t, func(t *testing.T, k kind) {
		a := mustMake(t, k, audit.Options{Depth: 64, MaxProducers: 3})
		data, err := a.MarshalBinary()
		if err != nil {
			t.Fatal(err)
		}
		b := mustMake(t, k, audit.Options{})
		b.CheckKey("x", 1)
		if err := b.UnmarshalBinary(data); err != nil || b.Len() != 0 || b.Depth() != 64 || b.MaxProducers() != 3 {
			t.Fatalf("%v, len %d depth %d max %d", err, b.Len(), b.Depth(), b.MaxProducers())
		}
		// The restored cap holds exactly: no budget slot leaked or lost.
		for i := range 10 {
			b.CheckKey(fmt.Sprintf("k%d", i), 1)
		}
		if b.Len() != 3 {
			t.Fatalf("Len %d after restoring cap 3", b.Len())
		}
	})
}

// snap builds a snapshot body with a valid checksum.
func snap(version byte, depth, maxProducers, count uint64, records ...[]byte) []byte {
	b := []byte("MSGA")
	b = append(b, version)
	b = binary.AppendUvarint(b, depth)
	b = binary.AppendUvarint(b, maxProducers)
	b = binary.AppendUvarint(b, count)
	for _, r := range records {
		b = append(b, r...)
	}
	return withCRC(b)
}

func withCRC(b []byte) []byte {
	return binary.LittleEndian.AppendUint32(b, crc32.Checksum(b, crc32.MakeTable(crc32.Castagnoli)))
}

func record(key string, depth int, marks ...uint64) []byte {
	bin, err := bitsetbin.New(depth)
	if err != nil {
		panic(err)
	}
	for _, m := range marks {
		bin.Mark(m)
	}
	r := binary.AppendUvarint(nil, uint64(len(key)))
	r = append(r, key...)
	r, _ = bin.AppendBinary(r)
	return r
}

func TestSnapshotCorrupt(t *testing.T) {
	t.Parallel()
	good := snap(1, 128, 4, 2, record("a", 128, 1, 2), record("b", 128, 5))
	cases := map[string][]byte{
		"empty":               nil,
		"short":               []byte("MSGA"),
		"bad magic":           withCRC(append([]byte("MSGB"), good[4:len(good)-4]...)),
		"version 2":           snap(2, 128, 4, 0),
		"bad checksum":        append(bytes.Clone(good[:len(good)-1]), good[len(good)-1]^1),
		"depth 0":             snap(1, 0, 4, 0),
		"depth too big":       snap(1, bitsetbin.MaxDepth+1, 4, 0),
		"cap 0":               snap(1, 128, 0, 0),
		"cap too big":         snap(1, 128, audit.MaxProducersLimit+1, 0),
		"count above cap":     snap(1, 128, 1, 2, record("a", 128, 1), record("b", 128, 1)),
		"count above bytes":   snap(1, 128, audit.MaxProducersLimit, audit.MaxProducersLimit),
		"huge varint":         withCRC(append([]byte("MSGA\x01"), 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01)),
		"missing record":      snap(1, 128, 4, 2, record("a", 128, 1), []byte{0, 0, 0, 0, 0}),
		"empty key":           snap(1, 128, 4, 1, append([]byte{0}, record("a", 128, 1)[2:]...)),
		"key length past end": snap(1, 128, 4, 1, []byte{100, 'a', 'b', 'c', 'd', 'e'}),
		"key too long":        snap(1, 128, 4, 1, record(strings.Repeat("k", 2000), 128, 1)),
		"duplicate key":       snap(1, 128, 4, 2, record("a", 128, 1), record("a", 128, 2)),
		"window depth wrong":  snap(1, 128, 4, 1, record("a", 2048, 1)),
		"bad window":          snap(1, 128, 4, 1, []byte{1, 'a', 9, 9, 9}),
		"trailing bytes":      snap(1, 128, 4, 1, record("a", 128, 1), []byte{0}),
	}
	forEachKind(t, func(t *testing.T, k kind) {
		b := mustMake(t, k, audit.Options{})
		if err := b.UnmarshalBinary(good); err != nil || b.Len() != 2 {
			t.Fatalf("good snapshot: %v, len %d", err, b.Len())
		}
		for name, data := range cases {
			a := mustMake(t, k, audit.Options{Depth: 100, MaxProducers: 9})
			fill(t, a, 3, 50)
			before, _ := a.MarshalBinary()
			if err := a.UnmarshalBinary(data); !errors.Is(err, audit.ErrCorrupt) {
				t.Errorf("%s: err = %v, want ErrCorrupt", name, err)
			}
			if after, _ := a.MarshalBinary(); !bytes.Equal(before, after) {
				t.Errorf("%s: audit changed by a failed restore", name)
			}
		}
		// Every truncation and every single-bit flip of a real snapshot is
		// rejected.
		a := mustMake(t, k, audit.Options{Depth: 100})
		fill(t, a, 3, 50)
		data, _ := a.MarshalBinary()
		for n := range len(data) {
			if err := mustMake(t, k, audit.Options{}).UnmarshalBinary(data[:n]); !errors.Is(err, audit.ErrCorrupt) {
				t.Fatalf("truncated to %d: %v", n, err)
			}
		}
		for i := range len(data) * 8 {
			c := bytes.Clone(data)
			c[i/8] ^= 1 << (i % 8)
			if err := mustMake(t, k, audit.Options{}).UnmarshalBinary(c); !errors.Is(err, audit.ErrCorrupt) {
				t.Fatalf("bit %d flipped: %v", i, err)
			}
		}
	})
}

// TestSnapshotSize checks the format is compact: about depth/8 bytes per
// producer plus its key.
func TestSnapshotSize(t *testing.T) {
	t.Parallel()
	a, _ := audit.New(audit.Options{MaxProducers: 100})
	fill(t, a, 100, 3000)
	data, err := a.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	per := len(data) / 100
	if want := 2048/8 + 64; per > want+len("ID:h-1-2-3:1:1:1:99") {
		t.Fatalf("%d bytes per producer, want about %d", per, want)
	}
}

// allocBound is the most a snapshot decode may allocate for an input of n
// bytes: each producer record (at least 5 bytes) costs a few hundred bytes
// of bookkeeping; a window is never larger than its encoding.
func allocBound(n int) uint64 { return uint64(100*n) + 64<<10 }

func totalAlloc() uint64 {
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.TotalAlloc
}

// TestSnapshotAllocationBound feeds crafted snapshots that declare huge
// counts, depths and lengths: the decoder must reject them (or accept them)
// without allocating more than a small multiple of their size.
func TestSnapshotAllocationBound(t *testing.T) {
	many := make([][]byte, 5000)
	for i := range many {
		many[i] = record(fmt.Sprintf("%d", i), bitsetbin.MaxDepth)
	}
	inputs := [][]byte{
		snap(1, bitsetbin.MaxDepth, audit.MaxProducersLimit, audit.MaxProducersLimit),
		snap(1, bitsetbin.MaxDepth, audit.MaxProducersLimit, 5000, many...), // unanchored windows of the largest depth
		snap(1, 128, 4, 1, []byte{0xff, 0xff, 0xff, 0x7f}),
	}
	for i, data := range inputs {
		a, _ := audit.New(audit.Options{})
		before := totalAlloc()
		err := a.UnmarshalBinary(data)
		got := totalAlloc() - before
		if got > allocBound(len(data)) {
			t.Errorf("input %d (%d bytes, err %v): allocated %d bytes, bound %d", i, len(data), err, got, allocBound(len(data)))
		}
		t.Logf("input %d: %d bytes, allocated %d, err %v", i, len(data), got, err)
	}
}

func FuzzUnmarshalBinary(f *testing.F) {
	a, _ := audit.New(audit.Options{Depth: 100, MaxProducers: 5})
	fill(f, a, 5, 120)
	full, _ := a.MarshalBinary()
	e, _ := audit.New(audit.Options{})
	empty, _ := e.MarshalBinary()
	f.Add(full)
	f.Add(empty)
	f.Add(snap(1, 128, 4, 2, record("a", 128, 1, 2), record("b", 128, 5)))
	f.Add(snap(1, 64, 1, 1, record("ID:x:1:1:1", 64)))
	f.Add([]byte("MSGA\x01"))
	f.Fuzz(func(t *testing.T, data []byte) {
		a, _ := audit.New(audit.Options{MaxProducers: 2})
		a.CheckKey("before", 1)
		before := totalAlloc()
		err := a.UnmarshalBinary(data)
		if got := totalAlloc() - before; got > allocBound(len(data)) {
			t.Fatalf("%d-byte input allocated %d bytes (bound %d)", len(data), got, allocBound(len(data)))
		}
		if err != nil {
			if !errors.Is(err, audit.ErrCorrupt) {
				t.Fatalf("error %v does not wrap ErrCorrupt", err)
			}
			if _, ok := a.LastSeq("before"); !ok || a.Len() != 1 || a.MaxProducers() != 2 {
				t.Fatal("failed restore changed the audit")
			}
			return
		}
		// An accepted snapshot re-encodes to a canonical form that round
		// trips exactly, and the audit stays usable within its cap.
		again, err := a.MarshalBinary()
		if err != nil {
			t.Fatal(err)
		}
		b, _ := audit.New(audit.Options{})
		if err := b.UnmarshalBinary(again); err != nil {
			t.Fatalf("re-encoded snapshot rejected: %v", err)
		}
		if third, _ := b.MarshalBinary(); !bytes.Equal(third, again) {
			t.Fatal("re-encoding is not stable")
		}
		// A few more producers (a restored depth may be up to 2^24, so
		// each new window can cost 2 MiB): the cap still holds.
		n := a.Len()
		for i := range 3 {
			a.CheckKey(fmt.Sprintf("fuzz-%d", i), uint64(i))
		}
		if want := min(n+3, a.MaxProducers()); a.Len() != want {
			t.Fatalf("Len %d after 3 new producers on %d, cap %d", a.Len(), n, a.MaxProducers())
		}
	})
}

// TestSnapshotNeverRaisesLimits restores snapshots whose depth or producer
// cap exceed the receiving audit's: they are refused and the audit keeps
// its limits and producers, so that a crafted snapshot of 50 producers at
// the largest depth cannot make every later check of them cost 2 MiB.
// Within the limits a restore adopts the snapshot's (lower) depth and cap.
func TestSnapshotNeverRaisesLimits(t *testing.T) {
	deep := make([][]byte, 50)
	for i := range deep {
		deep[i] = record(fmt.Sprintf("p%d", i), bitsetbin.MaxDepth)
	}
	cases := []struct {
		name               string
		depth, cap, count  uint64
		records            [][]byte
		wantDepth, wantCap int
		refused            bool
	}{
		{"deeper", bitsetbin.MaxDepth, 64, 50, deep, 2048, 64, true},
		{"larger cap", 2048, 65, 0, nil, 2048, 64, true},
		{"largest cap", 2048, audit.MaxProducersLimit, 0, nil, 2048, 64, true},
		{"equal", 2048, 64, 0, nil, 2048, 64, false},
		{"lower", 128, 3, 1, [][]byte{record("a", 128, 5)}, 128, 3, false},
	}
	for _, k := range kinds {
		for _, c := range cases {
			t.Run(k.name+"/"+c.name, func(t *testing.T) {
				a := mustMake(t, k, audit.Options{})
				a.CheckKey("before", 1)
				err := a.UnmarshalBinary(snap(1, c.depth, c.cap, c.count, c.records...))
				if c.refused != (err != nil) || (err != nil && !errors.Is(err, audit.ErrCorrupt)) {
					t.Fatalf("restore: %v, want refused %v with ErrCorrupt", err, c.refused)
				}
				if a.Depth() != c.wantDepth || a.MaxProducers() != c.wantCap {
					t.Fatalf("depth %d, cap %d after the restore; want %d, %d", a.Depth(), a.MaxProducers(), c.wantDepth, c.wantCap)
				}
				if _, kept := a.LastSeq("before"); kept != c.refused {
					t.Fatalf("producer before the restore kept: %v, want %v", kept, c.refused)
				}
			})
		}
	}
}
