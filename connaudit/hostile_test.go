package connaudit_test

import (
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"strings"
	"testing"

	"github.com/acemq/msgaudit/audit"
	"github.com/acemq/msgaudit/connaudit"
	"github.com/acemq/msgaudit/msgid"
)

// emptyAuditSnapshot is the smallest audit snapshot: depth 1, cap 1, no
// producers (13 bytes).
var emptyAuditSnapshot = func() []byte {
	b := []byte("MSGA\x01\x01\x01\x00")
	return binary.LittleEndian.AppendUint32(b, crc32.Checksum(b, crc32.MakeTable(crc32.Castagnoli)))
}()

// craftedSnapshot is a connection-audit snapshot with the given settings
// (depth, maxProducers, maxIDLength, maxDestinations, maxConsumers,
// shards) and n minimal queue records, each an empty audit.
func craftedSnapshot(settings [6]uint64, n int) []byte {
	return craftedSnapshotOf(settings, n, 0)
}

// craftedSnapshotOf is craftedSnapshot with queues minimal queue records
// and topics minimal topic records (consumer "c", one topic each).
func craftedSnapshotOf(settings [6]uint64, queues, topics int) []byte {
	b := []byte("MSGC\x01")
	for _, v := range settings {
		b = binary.AppendUvarint(b, v)
	}
	record := func(k connaudit.Kind, name string) {
		b = append(b, byte(k))
		b = binary.AppendUvarint(b, uint64(len(name)))
		b = append(b, name...)
		b = binary.AppendUvarint(b, uint64(len(emptyAuditSnapshot)))
		b = append(b, emptyAuditSnapshot...)
	}
	b = binary.AppendUvarint(b, uint64(queues))
	for i := range queues {
		record(connaudit.Queue, fmt.Sprint(i))
	}
	b = binary.AppendUvarint(b, uint64(topics))
	for i := range topics {
		b = binary.AppendUvarint(b, 1)
		b = append(b, 'c')
		record(connaudit.Topic, fmt.Sprint(i))
	}
	return binary.LittleEndian.AppendUint32(b, crc32.Checksum(b, crc32.MakeTable(crc32.Castagnoli)))
}

// snapshotCaps returns the MaxDestinations and MaxConsumers a snapshot
// declares (defaults applied), and false if its header does not parse.
func snapshotCaps(data []byte) (maxDestinations, maxConsumers uint64, ok bool) {
	if len(data) < 5 || string(data[:4]) != "MSGC" {
		return 0, 0, false
	}
	b := data[5:]
	var vals [6]uint64
	for i := range vals {
		v, n := binary.Uvarint(b)
		if n <= 0 {
			return 0, 0, false
		}
		vals[i], b = v, b[n:]
	}
	return cmp.Or(vals[3], connaudit.DefaultMaxDestinations), cmp.Or(vals[4], connaudit.DefaultMaxConsumers), true
}

// TestSnapshotCountsWithinItsCaps restores snapshots that hold more audits
// than their own MaxDestinations or MaxConsumers declares, under receivers
// whose caps would allow them: each is refused with ErrCorrupt and leaves
// the audit unchanged, while the same records under caps that fit restore.
func TestSnapshotCountsWithinItsCaps(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name           string
		settings       [6]uint64
		queues, topics int
		refused        bool
	}{
		{"110 queues under MaxDestinations 10", [6]uint64{0, 0, 0, 10, 0, 0}, 110, 0, true},
		{"11 queues under MaxDestinations 10", [6]uint64{0, 0, 0, 10, 0, 0}, 11, 0, true},
		{"10 queues under MaxDestinations 10", [6]uint64{0, 0, 0, 10, 0, 0}, 10, 0, false},
		{"110 topics under MaxConsumers 10", [6]uint64{0, 0, 0, 0, 10, 0}, 0, 110, true},
		{"11 topics under MaxConsumers 10", [6]uint64{0, 0, 0, 0, 10, 0}, 0, 11, true},
		{"10 topics under MaxConsumers 10", [6]uint64{0, 0, 0, 0, 10, 0}, 0, 10, false},
		{"1001 queues under the default", [6]uint64{}, 1001, 0, true},
		{"1001 topics under the default", [6]uint64{}, 0, 1001, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			a := mustNew(t, connaudit.Options{MaxDestinations: 5000, MaxConsumers: 5000})
			a.Check("c", qQ, "before:1")
			err := a.UnmarshalBinary(craftedSnapshotOf(c.settings, c.queues, c.topics))
			if c.refused {
				if !errors.Is(err, connaudit.ErrCorrupt) {
					t.Fatalf("restore: %v, want a refusal wrapping ErrCorrupt (%d queues, %d topics)", err, a.Stats().Queues, a.Stats().Topics)
				}
				if v, _ := a.Check("c", qQ, "before:1"); v != audit.Duplicate {
					t.Fatalf("a refused restore changed the audit: %v", v)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if st := a.Stats(); st.Queues != c.queues || st.Topics != c.topics {
				t.Fatalf("restored %d queues and %d topics, want %d and %d", st.Queues, st.Topics, c.queues, c.topics)
			}
		})
	}
}

// perShardedAudit is what restoring one destination audit may cost beyond
// the input when the receiving connection audit has Shards set: 1 KiB per
// shard plus 4 KiB. An audit.Sharded's shards (384 bytes each) and its
// directory are built once for the audit and once more while its snapshot
// is decoded (about 840 bytes per shard measured at 64 shards).
func perShardedAudit(shards int) uint64 { return uint64(shards)<<10 + 4<<10 }

// snapshotBound is the documented bound of what UnmarshalBinary allocates
// for data: 100 times its size plus 64 KiB, plus perShardedAudit for each
// destination audit it restores when the receiver has Shards set.
func snapshotBound(data []byte, shards, audits int) uint64 {
	b := uint64(100*len(data)) + 64<<10
	if shards > 0 {
		b += uint64(audits) * perShardedAudit(shards)
	}
	return b
}

// TestCraftedSnapshotBounded restores crafted snapshots of about 1.9 KB:
// 110 empty queue audits under a header asking for 4096 shards and up to
// 1<<20 destinations. Such a snapshot used to allocate about 300 MiB (every
// record an audit.Sharded of 4096 shards); a snapshot now never raises the
// receiving audit's limits and never chooses its shard count, and every
// restore stays within snapshotBound (the numbers SECURITY.md gives).
func TestCraftedSnapshotBounded(t *testing.T) {
	const records = 110
	cases := []struct {
		name     string
		settings [6]uint64
		receiver connaudit.Options
		refused  bool
	}{
		{"raises MaxDestinations", [6]uint64{0, 0, 0, connaudit.MaxTableLimit, 0, 4096}, connaudit.Options{}, true},
		{"raises Depth", [6]uint64{1 << 24, 0, 0, 0, 0, 0}, connaudit.Options{}, true},
		{"raises MaxProducers", [6]uint64{0, 65, 0, 0, 0, 0}, connaudit.Options{}, true},
		{"raises MaxIDLength", [6]uint64{0, 0, 1 << 20, 0, 0, 0}, connaudit.Options{}, true},
		{"raises MaxConsumers", [6]uint64{0, 0, 0, 0, 1001, 0}, connaudit.Options{}, true},
		{"asks for 4096 shards", [6]uint64{0, 0, 0, 0, 0, 4096}, connaudit.Options{}, false},
		{"4096 shards into Shards 16", [6]uint64{0, 0, 0, 0, 0, 4096}, connaudit.Options{Shards: 16}, false},
		{"within a large receiver", [6]uint64{0, 0, 0, 5000, 0, 4096}, connaudit.Options{MaxDestinations: 5000, Shards: 64}, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			data := craftedSnapshot(c.settings, records)
			if len(data) < 1800 || len(data) > 2000 {
				t.Fatalf("crafted snapshot of %d bytes, want about 1.9 KB", len(data))
			}
			a := mustNew(t, c.receiver)
			a.Check("c", qQ, "before:1")
			before := totalAlloc()
			err := a.UnmarshalBinary(data)
			got := totalAlloc() - before
			if bound := snapshotBound(data, c.receiver.Shards, records); got > bound {
				t.Errorf("%d-byte snapshot allocated %d bytes (err %v), bound %d", len(data), got, err, bound)
			}
			t.Logf("%d bytes: allocated %d, err %v", len(data), got, err)
			if c.refused {
				if !errors.Is(err, connaudit.ErrCorrupt) {
					t.Fatalf("restore: %v, want a refusal wrapping ErrCorrupt", err)
				}
				if v, _ := a.Check("c", qQ, "before:1"); v != audit.Duplicate {
					t.Fatalf("a refused restore changed the audit: %v", v)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if st := a.Stats(); st.Queues != records {
				t.Fatalf("%d queue audits restored, want %d", st.Queues, records)
			}
		})
	}
}

// TestHostileIDsHeld pins limits that already held: a 1 MiB id is an
// error wrapping msgid.ErrTooLong (its message short), and creates no
// producer; a producer at sequence 2^64-1 followed by 0 gets TooOld for 0,
// never a second "new".
func TestHostileIDsHeld(t *testing.T) {
	a := mustNew(t, connaudit.Options{})
	long := strings.Repeat("k", 1<<20) + ":1"
	v, err := a.Check("c", qQ, long)
	if !errors.Is(err, msgid.ErrTooLong) || v != audit.TooOld || len(err.Error()) > 512 {
		t.Fatalf("1 MiB id: %v, %d-byte error %.100q", v, len(fmt.Sprint(err)), err)
	}
	if st := a.Stats(); st.Producers != 0 || st.TooLong != 1 {
		t.Fatalf("after a 1 MiB id: %+v", st)
	}
	for _, c := range []struct {
		id   string
		want audit.Sighting
	}{{"p:18446744073709551615", audit.FirstSeen}, {"p:18446744073709551615", audit.Duplicate}, {"p:0", audit.TooOld}, {"p:0", audit.TooOld}} {
		if v, err := a.Check("c", qQ, c.id); err != nil || v != c.want {
			t.Fatalf("Check(%s) = %v, %v; want %v", c.id, v, err, c.want)
		}
	}
}
