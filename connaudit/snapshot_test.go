package connaudit_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"runtime"
	"testing"

	"github.com/acemq/msgaudit/audit"
	"github.com/acemq/msgaudit/connaudit"
)

func populated(t interface{ Fatal(...any) }, o connaudit.Options) *connaudit.Audit {
	a := mustNew(t, o)
	for i := 1; i <= 300; i++ {
		for _, c := range []string{"c1", "c2"} {
			a.Check(c, qQ, fmt.Sprintf("p%d:%d", i%3, i))
			a.Check(c, qT, fmt.Sprintf("p:%d", i))
		}
		a.Check("c1", tmt, fmt.Sprintf("p:%d", i))
		a.Check("c3", tmq, fmt.Sprintf("p:%d", i))
	}
	a.Rollback("c1", qQ, "p1:100")
	return a
}

func TestSnapshotRoundTrip(t *testing.T) {
	t.Parallel()
	forVariants(t, func(t *testing.T, o connaudit.Options) {
		o.Depth, o.MaxDestinations, o.MaxConsumers = 500, 10, 20
		a := populated(t, o)
		data, err := a.MarshalBinary()
		if err != nil {
			t.Fatal(err)
		}
		b := mustNew(t, connaudit.Options{})
		b.Check("old", qQ, "x:1")
		if err := b.UnmarshalBinary(data); err != nil {
			t.Fatal(err)
		}
		sa, sb := a.Stats(), b.Stats()
		if sb.Queues != 2 || sb.Topics != 3 || sb.Producers != sa.Producers {
			t.Fatalf("restored %+v, original %+v", sb, sa)
		}
		for i := 0; i <= 310; i += 7 {
			for _, c := range []call{
				{"c2", qQ, fmt.Sprintf("p%d:%d", i%3, i), 0}, {"c1", qQ, "p1:100", 0}, {"c9", qQ, "x:1", 0},
				{"c2", qT, fmt.Sprintf("p:%d", i), 0}, {"c3", qT, fmt.Sprintf("p:%d", i), 0},
				{"c1", tmt, fmt.Sprintf("p:%d", i), 0}, {"c1", tmq, fmt.Sprintf("p:%d", i), 0},
			} {
				va, _ := a.Check(c.consumer, c.d, c.id)
				vb, _ := b.Check(c.consumer, c.d, c.id)
				if va != vb {
					t.Fatalf("%s %v %s: original %v, restored %v", c.consumer, c.d, c.id, va, vb)
				}
			}
		}
		// The restored cap (20 topic audits) holds: 20 new subscriptions
		// evict the 4 restored ones.
		data, _ = a.MarshalBinary()
		c := mustNew(t, connaudit.Options{})
		if err := c.UnmarshalBinary(data); err != nil {
			t.Fatal(err)
		}
		for i := range 20 {
			c.Check(fmt.Sprintf("new-%d", i), qT, "p:1")
		}
		if st := c.Stats(); st.Topics != 20 || st.AuditEvictions != 4 {
			t.Fatalf("%+v", st)
		}
	})
}

func TestSnapshotCorrupt(t *testing.T) {
	t.Parallel()
	a := populated(t, connaudit.Options{Depth: 64})
	data, err := a.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	crc := func(b []byte) []byte {
		return binary.LittleEndian.AppendUint32(b, crc32.Checksum(b, crc32.MakeTable(crc32.Castagnoli)))
	}
	hdr := func(counts ...byte) []byte {
		return crc(append([]byte("MSGC\x01\x00\x00\x00\x00\x00\x00"), counts...))
	}
	cases := map[string][]byte{
		"empty":            nil,
		"bad magic":        crc(append([]byte("MSGX"), data[4:len(data)-4]...)),
		"bad version":      crc(append([]byte("MSGC\x02"), data[5:len(data)-4]...)),
		"bad checksum":     append(bytes.Clone(data[:len(data)-1]), data[len(data)-1]^0x80),
		"huge queue count": hdr(0xff, 0xff, 0x3f, 0),
		"huge topic count": hdr(0, 0xff, 0xff, 0x3f),
		"missing counts":   hdr(),
		"queue kind topic": hdr(1, byte(connaudit.Topic), 1, 'q', 0, 0),
		"empty queue name": hdr(1, byte(connaudit.Queue), 0, 0, 0),
		"bad setting":      crc([]byte("MSGC\x01\xff\xff\xff\xff\x0f\x00\x00\x00\x00\x00\x00\x00")),
		"trailing":         crc(append(bytes.Clone(data[:len(data)-4]), 0)),
	}
	for name, c := range cases {
		b := populated(t, connaudit.Options{MaxDestinations: 7})
		before, _ := b.MarshalBinary()
		if err := b.UnmarshalBinary(c); !errors.Is(err, connaudit.ErrCorrupt) {
			t.Errorf("%s: %v", name, err)
		}
		if after, _ := b.MarshalBinary(); !bytes.Equal(before, after) {
			t.Errorf("%s: a failed restore changed the audit", name)
		}
	}
	for n := range len(data) {
		if err := mustNew(t, connaudit.Options{}).UnmarshalBinary(data[:n]); !errors.Is(err, connaudit.ErrCorrupt) {
			t.Fatalf("truncated to %d: %v", n, err)
		}
	}
	for i := 0; i < len(data)*8; i += 7 {
		c := bytes.Clone(data)
		c[i/8] ^= 1 << (i % 8)
		if err := mustNew(t, connaudit.Options{}).UnmarshalBinary(c); !errors.Is(err, connaudit.ErrCorrupt) {
			t.Fatalf("bit %d flipped: %v", i, err)
		}
	}
}

func totalAlloc() uint64 {
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.TotalAlloc
}

func FuzzUnmarshalBinary(f *testing.F) {
	small := mustNew(f, connaudit.Options{Depth: 64, MaxProducers: 2})
	small.Check("c", qQ, "p:1")
	small.Check("c", qT, "p:2")
	for _, a := range []*connaudit.Audit{mustNew(f, connaudit.Options{}), small, populated(f, connaudit.Options{Depth: 64})} {
		data, err := a.MarshalBinary()
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	f.Add(craftedSnapshot([6]uint64{0, 0, 0, connaudit.MaxTableLimit, 0, 4096}, 110))
	f.Add(craftedSnapshot([6]uint64{0, 0, 0, 0, 0, 4096}, 3))
	f.Add(craftedSnapshotOf([6]uint64{0, 0, 0, 10, 0, 0}, 110, 0))
	f.Add(craftedSnapshotOf([6]uint64{0, 0, 0, 0, 10, 0}, 0, 110))
	f.Fuzz(func(t *testing.T, data []byte) {
		// The receiver alternates between Locked and 4-shard audits; the
		// bound is SECURITY.md's (snapshotBound), checked on every input.
		// Every audit record costs at least 17 bytes of input.
		shards := len(data) % 2 * 4
		a := mustNew(t, connaudit.Options{Shards: shards})
		a.Check("c", qQ, "before:1")
		before := totalAlloc()
		err := a.UnmarshalBinary(data)
		if got, bound := totalAlloc()-before, snapshotBound(data, shards, len(data)/17); got > bound {
			t.Fatalf("%d-byte input allocated %d bytes (bound %d, shards %d)", len(data), got, bound, shards)
		}
		if err != nil {
			if !errors.Is(err, connaudit.ErrCorrupt) {
				t.Fatalf("error %v does not wrap ErrCorrupt", err)
			}
			if v, _ := a.Check("c", qQ, "before:1"); v != audit.Duplicate {
				t.Fatal("a failed restore changed the audit")
			}
			return
		}
		// A restore never holds more audits than the snapshot's own caps.
		maxQ, maxT, ok := snapshotCaps(data)
		if st := a.Stats(); !ok || uint64(st.Queues) > maxQ || uint64(st.Topics) > maxT {
			t.Fatalf("restored %d queues and %d topics from a snapshot declaring MaxDestinations %d and MaxConsumers %d (header parsed: %v)",
				st.Queues, st.Topics, maxQ, maxT, ok)
		}
		again, err := a.MarshalBinary()
		if err != nil {
			t.Fatal(err)
		}
		b := mustNew(t, connaudit.Options{})
		if err := b.UnmarshalBinary(again); err != nil {
			t.Fatalf("re-encoded snapshot rejected: %v", err)
		}
	})
}

func TestSnapshotKeepsLRUOrder(t *testing.T) {
	t.Parallel()
	forVariants(t, func(t *testing.T, o connaudit.Options) {
		o.MaxConsumers, o.MaxDestinations = 3, 2
		a := mustNew(t, o)
		q2 := connaudit.Destination{Kind: connaudit.Queue, Name: "Q2"}
		run(t, a, []call{{"c1", qT, "p:1", N}, {"c2", qT, "p:1", N}, {"c3", qT, "p:1", N}, {"c1", qT, "p:2", N},
			{"c", qQ, "p:1", N}, {"c", q2, "p:1", N}, {"c", qQ, "p:2", N}})
		data, err := a.MarshalBinary()
		if err != nil {
			t.Fatal(err)
		}
		b := mustNew(t, connaudit.Options{})
		if err := b.UnmarshalBinary(data); err != nil {
			t.Fatal(err)
		}
		run(t, b, []call{{"c4", qT, "p:1", N}, {"c1", qT, "p:1", D}, {"c3", qT, "p:1", D}, {"c2", qT, "p:1", N},
			{"c", connaudit.Destination{Kind: connaudit.Queue, Name: "Q3"}, "p:1", N}, {"c", qQ, "p:1", D}, {"c", q2, "p:1", N}})
	})
}
