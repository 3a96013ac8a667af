package audit_test

import (
	"testing"

	"github.com/acemq/msgaudit/audit"
)

// auditor is the method set shared by Audit, Locked and Sharded; every
// table and property test runs on all of them.
type auditor interface {
	Check(id string) (audit.Sighting, error)
	CheckKey(key string, seq uint64) audit.Sighting
	IsDuplicate(id string) bool
	Rollback(id string) error
	RollbackKey(key string, seq uint64)
	IsInOrder(id string) (bool, error)
	LastSeq(key string) (uint64, bool)
	Clear()
	Len() int
	Depth() int
	MaxProducers() int
	SetDepth(d int) error
	SetMaxProducers(n int) error
	Stats() audit.Stats
	MarshalBinary() ([]byte, error)
	UnmarshalBinary(data []byte) error
}

var (
	_ auditor = (*audit.Audit)(nil)
	_ auditor = (*audit.Locked)(nil)
	_ auditor = (*audit.Sharded)(nil)
)

// kind builds one audit type. perShard is true for a Sharded audit with
// several shards: "recent" evictions are judged per shard, and producers
// checked since the same insert tie in the LRU order.
type kind struct {
	name       string
	perShard   bool
	concurrent bool
	make       func(o audit.Options) (auditor, error)
}

var kinds = []kind{
	{"Audit", false, false, func(o audit.Options) (auditor, error) { return audit.New(o) }},
	{"Locked", false, true, func(o audit.Options) (auditor, error) { return audit.NewLocked(o) }},
	{"Sharded/shards=1", false, true, func(o audit.Options) (auditor, error) { return audit.NewSharded(o, 1) }},
	{"Sharded/shards=4", true, true, func(o audit.Options) (auditor, error) { return audit.NewSharded(o, 4) }},
	{"Sharded/shards=default", true, true, func(o audit.Options) (auditor, error) { return audit.NewSharded(o, 0) }},
}

func mustMake(t testing.TB, k kind, o audit.Options) auditor {
	t.Helper()
	a, err := k.make(o)
	if err != nil {
		t.Fatalf("%s: %v", k.name, err)
	}
	return a
}

// forEachKind runs f as a parallel subtest per audit type.
func forEachKind(t *testing.T, f func(t *testing.T, k kind)) {
	t.Helper()
	for _, k := range kinds {
		t.Run(k.name, func(t *testing.T) {
			t.Parallel()
			f(t, k)
		})
	}
}

// step is one call of a table row and its expected result.
type step struct {
	id   string
	want audit.Sighting
}

func runSteps(t *testing.T, a auditor, steps []step) {
	t.Helper()
	for i, s := range steps {
		got, err := a.Check(s.id)
		if err != nil {
			t.Fatalf("step %d: Check(%q): %v", i, s.id, err)
		}
		if got != s.want {
			t.Fatalf("step %d: Check(%q) = %v, want %v", i, s.id, got, s.want)
		}
	}
}
