package connaudit_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/acemq/msgaudit/audit"
	"github.com/acemq/msgaudit/connaudit"
	"github.com/acemq/msgaudit/msgid"
)

const (
	N = audit.FirstSeen
	D = audit.Duplicate
	O = audit.TooOld
)

var (
	qQ  = connaudit.Destination{Kind: connaudit.Queue, Name: "Q"}
	qT  = connaudit.Destination{Kind: connaudit.Topic, Name: "T"}
	qT2 = connaudit.Destination{Kind: connaudit.Topic, Name: "T2"}
	tmq = connaudit.Destination{Kind: connaudit.TempQueue, Name: "tmp"}
	tmt = connaudit.Destination{Kind: connaudit.TempTopic, Name: "tmp"}
)

// variants runs a test on both per-destination audit types.
var variants = []struct {
	name string
	o    connaudit.Options
}{
	{"audits=Locked", connaudit.Options{}},
	{"audits=Sharded", connaudit.Options{Shards: 4}},
}

func mustNew(t interface{ Fatal(...any) }, o connaudit.Options) *connaudit.Audit {
	a, err := connaudit.New(o)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

type call struct {
	consumer string
	d        connaudit.Destination
	id       string
	want     audit.Sighting
}

func run(t *testing.T, a *connaudit.Audit, calls []call) {
	t.Helper()
	for i, c := range calls {
		got, err := a.Check(c.consumer, c.d, c.id)
		if err != nil || got != c.want {
			t.Fatalf("call %d: Check(%q, %v, %q) = %v, %v; want %v", i, c.consumer, c.d, c.id, got, err, c.want)
		}
	}
}

func forVariants(t *testing.T, f func(t *testing.T, o connaudit.Options)) {
	for _, v := range variants {
		t.Run(v.name, func(t *testing.T) {
			t.Parallel()
			f(t, v.o)
		})
	}
}

// TestActiveMQBehaviour runs the call sequences of ActiveMQ's
// ConnectionAudit (routing by destination kind, the switch, rollback,
// removal of a consumer, messages without destination or id); see
// docs/activemq-compatibility.md.
func TestActiveMQBehaviour(t *testing.T) {
	t.Parallel()
	forVariants(t, func(t *testing.T, o connaudit.Options) {
		t.Run("disabled records nothing", func(t *testing.T) {
			o := o
			o.Disabled = true
			a := mustNew(t, o)
			run(t, a, []call{{"d1", qQ, "p:1", N}, {"d1", qQ, "p:1", N}})
			if a.Enabled() {
				t.Fatal("enabled")
			}
			a.SetEnabled(true)
			run(t, a, []call{{"d1", qQ, "p:1", N}, {"d1", qQ, "p:1", D}})
			if st := a.Stats(); st.Disabled != 2 || st.Queues != 1 || st.Checks != 2 {
				t.Fatalf("%+v", st)
			}
		})
		t.Run("queue audits are shared", func(t *testing.T) {
			a := mustNew(t, o)
			run(t, a, []call{{"d1", qQ, "p:1", N}, {"d2", qQ, "p:1", D}, {"d1", qQ, "p:1", D}})
			parsed, _ := connaudit.ParseDestination("/queue/Q")
			run(t, a, []call{{"d3", parsed, "p:1", D}})
			if err := a.Rollback("d2", qQ, "p:1"); err != nil {
				t.Fatal(err)
			}
			run(t, a, []call{{"d1", qQ, "p:1", N}, {"d1", qQ, "p:1", D}})
		})
		t.Run("topic audits are per consumer", func(t *testing.T) {
			a := mustNew(t, o)
			run(t, a, []call{{"d1", qT, "p:1", N}, {"d2", qT, "p:1", N}, {"d1", qT, "p:1", D}, {"d2", qT, "p:1", D},
				{"d1", qQ, "p:1", N}})
			a.RemoveConsumer("d1")
			run(t, a, []call{{"d1", qT, "p:1", N}, {"d2", qT, "p:1", D}, {"d1", qQ, "p:1", D}})
			if st := a.Stats(); st.Topics != 2 || st.Queues != 1 {
				t.Fatalf("%+v", st)
			}
		})
		t.Run("no destination, no id, temporary destinations", func(t *testing.T) {
			a := mustNew(t, o)
			run(t, a, []call{{"d1", connaudit.Destination{}, "p:1", N}, {"d1", connaudit.Destination{}, "p:1", N},
				{"d1", connaudit.Destination{Kind: connaudit.Queue}, "p:1", N},
				{"d1", qQ, "", N}, {"d1", qQ, "", N},
				{"d1", tmq, "p:1", N}, {"d2", tmq, "p:1", D},
				{"d1", tmt, "p:1", N}, {"d2", tmt, "p:1", N}, {"d1", tmt, "p:1", D}})
			// Queue "tmp" and temp queue "tmp" are different destinations.
			run(t, a, []call{{"d1", connaudit.Destination{Kind: connaudit.Queue, Name: "tmp"}, "p:1", N}})
			st := a.Stats()
			if st.NoDestination != 3 || st.NoID != 2 || st.Queues != 2 || st.Topics != 2 {
				t.Fatalf("%+v", st)
			}
			if err := a.Rollback("d1", connaudit.Destination{}, "p:1"); err != nil {
				t.Fatal(err)
			}
		})
	})
}

func TestErrors(t *testing.T) {
	t.Parallel()
	a := mustNew(t, connaudit.Options{})
	bad := connaudit.Destination{Kind: 9, Name: "x"}
	if _, err := a.Check("c", bad, "p:1"); !errors.Is(err, connaudit.ErrDestination) {
		t.Fatal(err)
	}
	if _, err := a.Check("c", connaudit.Destination{Kind: 9}, "p:1"); !errors.Is(err, connaudit.ErrDestination) {
		t.Fatal(err)
	}
	if err := a.Rollback("c", bad, "p:1"); !errors.Is(err, connaudit.ErrDestination) {
		t.Fatal(err)
	}
	if v, err := a.Check("c", qQ, "garbage"); !errors.Is(err, msgid.ErrMalformed) || v != O {
		t.Fatal(v, err)
	}
	run(t, a, []call{{"c", qQ, "p:1", N}})
	if err := a.Rollback("c", qQ, "p:x"); !errors.Is(err, msgid.ErrMalformed) {
		t.Fatal(err)
	}
	if a.IsDuplicate("c", qQ, "garbage") || a.IsDuplicate("c", qQ, "p:2") || !a.IsDuplicate("c", qQ, "p:2") {
		t.Fatal("IsDuplicate")
	}
	// Rollback never creates an audit.
	if err := a.Rollback("c", qT, "p:1"); err != nil || a.Stats().Topics != 0 {
		t.Fatal(err, a.Stats())
	}
	for _, o := range []connaudit.Options{{Depth: -1}, {MaxProducers: -1}, {MaxIDLength: -1}, {MaxDestinations: -1},
		{MaxConsumers: -1}, {MaxConsumers: connaudit.MaxTableLimit + 1}, {Shards: -1}, {Depth: 1 << 25}} {
		if _, err := connaudit.New(o); !errors.Is(err, connaudit.ErrOptions) {
			t.Errorf("New(%+v) = %v", o, err)
		}
	}
	if err := a.SetDepth(-1); !errors.Is(err, connaudit.ErrOptions) {
		t.Error(err)
	}
	if err := a.SetMaxProducers(-1); !errors.Is(err, connaudit.ErrOptions) {
		t.Error(err)
	}
}

// TestDefaultCaps: without options each map holds 1000 audits, as
// ActiveMQ's ConnectionAudit caps both of its maps.
func TestDefaultCaps(t *testing.T) {
	t.Parallel()
	a := mustNew(t, connaudit.Options{})
	for i := range connaudit.DefaultMaxDestinations + 1 {
		a.Check("c", connaudit.Destination{Kind: connaudit.Queue, Name: fmt.Sprintf("q%d", i)}, "p:1")
	}
	for i := range connaudit.DefaultMaxConsumers + 1 {
		a.Check(fmt.Sprintf("c%d", i), qT, "p:1")
	}
	if st := a.Stats(); connaudit.DefaultMaxDestinations != 1000 || connaudit.DefaultMaxConsumers != 1000 ||
		st.Queues != 1000 || st.Topics != 1000 || st.AuditEvictions != 2 {
		t.Fatalf("%+v", st)
	}
}

func TestCaps(t *testing.T) {
	t.Parallel()
	forVariants(t, func(t *testing.T, o connaudit.Options) {
		o.MaxDestinations, o.MaxConsumers = 2, 2
		a := mustNew(t, o)
		q := func(n string) connaudit.Destination { return connaudit.Destination{Kind: connaudit.Queue, Name: n} }
		run(t, a, []call{{"c", q("q1"), "p:1", N}, {"c", q("q2"), "p:1", N}, {"c", q("q1"), "p:2", N},
			{"c", q("q3"), "p:1", N}, // evicts q2, the least recently used
			{"c", q("q1"), "p:1", D}, {"c", q("q3"), "p:1", D}, {"c", q("q2"), "p:1", N}})
		run(t, a, []call{{"c1", qT, "p:1", N}, {"c1", qT2, "p:1", N}, {"c2", qT, "p:1", N}, // evicts c1/T
			{"c1", qT2, "p:1", D}, {"c1", qT, "p:1", N}})
		st := a.Stats()
		if st.Queues != 2 || st.Topics != 2 || st.AuditEvictions != 4 {
			t.Fatalf("%+v", st)
		}
		// Counters of evicted audits are kept.
		if st.Checks != 12 || st.FirstSeen != 9 || st.Duplicates != 3 {
			t.Fatalf("%+v", st)
		}
	})
}

func TestSetDepthAndCap(t *testing.T) {
	t.Parallel()
	forVariants(t, func(t *testing.T, o connaudit.Options) {
		o.Depth = 64
		a := mustNew(t, o)
		for i := 0; i <= 200; i++ {
			a.Check("c", qQ, fmt.Sprintf("p:%d", i))
			a.Check("c", qT, fmt.Sprintf("p:%d", i))
		}
		run(t, a, []call{{"c", qQ, "p:0", O}, {"c", qT, "p:0", O}})
		if err := a.SetDepth(10000); err != nil {
			t.Fatal(err)
		}
		// Existing audits grew without losing anything; new ones use the
		// new depth.
		run(t, a, []call{{"c", qQ, "p:150", D}, {"c", qQ, "p:5000", N}, {"c", qQ, "p:12000", N}, {"c", qQ, "p:5000", D},
			{"c", qT, "p:5000", N}, {"c", qT, "p:12000", N}, {"c", qT, "p:5000", D},
			{"c", qT2, "p:0", N}, {"c", qT2, "p:9000", N}, {"c", qT2, "p:0", D}})
		for i := range 5 {
			a.Check("c", qQ, fmt.Sprintf("x%d:1", i))
		}
		if err := a.SetMaxProducers(2); err != nil {
			t.Fatal(err)
		}
		run(t, a, []call{{"c", qQ, "x4:1", D}, {"c", qQ, "x3:1", D}, {"c", qQ, "p:5000", N}})
		st := a.Stats()
		// 4 evicted by the shrink, x4 by p's return.
		if st.Producers != 2+1+1 || st.Evictions != 5 {
			t.Fatalf("%+v", st)
		}
	})
}

func TestCheckAllocatesNothing(t *testing.T) {
	for _, v := range variants {
		a := mustNew(t, v.o)
		ids := make([]string, 64)
		for i := range ids {
			ids[i] = fmt.Sprintf("ID:host-1-2-3:1:1:1:%d:%d", i%8, i/8+1)
		}
		for _, id := range ids {
			a.Check("c1", qQ, id)
			a.Check("c1", qT, id)
		}
		i := 0
		allocs := testing.AllocsPerRun(500, func() {
			a.Check("c1", qQ, ids[i%len(ids)])
			a.Check("c1", qT, ids[i%len(ids)])
			i++
		})
		if allocs != 0 {
			t.Fatalf("%s: %v allocs per check on a tracked destination and producer", v.name, allocs)
		}
	}
}
