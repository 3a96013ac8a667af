package audit_test

import (
	"fmt"

	"github.com/acemq/msgaudit/audit"
)

func ExampleAudit_Check() {
	a, err := audit.New(audit.Options{}) // depth 2048, 64 producers
	if err != nil {
		panic(err)
	}
	for _, id := range []string{
		"ID:host-41234-1700000000000-1:1:1:1:1",
		"ID:host-41234-1700000000000-1:1:1:1:2",
		"ID:host-41234-1700000000000-1:1:1:1:1", // redelivered
		"ID:host-41234-1700000000000-1:1:1:1:9000",
		"ID:host-41234-1700000000000-1:1:1:1:3", // more than 2048 behind 9000
		"not-an-id",
	} {
		v, err := a.Check(id)
		fmt.Println(v, err)
	}
	fmt.Println(a.Len(), "producer")
	// Output:
	// first-seen <nil>
	// first-seen <nil>
	// duplicate <nil>
	// first-seen <nil>
	// too-old <nil>
	// too-old msgid: malformed id: "not-an-id"
	// 1 producer
}

func ExampleAudit_IsDuplicate() {
	a, _ := audit.New(audit.Options{})
	fmt.Println(a.IsDuplicate("orders:7"))
	fmt.Println(a.IsDuplicate("orders:7"))
	// The handler failed: roll back so the broker's redelivery is processed.
	_ = a.Rollback("orders:7")
	fmt.Println(a.IsDuplicate("orders:7"))
	// Output:
	// false
	// true
	// false
}

func ExampleLocked() {
	a, _ := audit.NewLocked(audit.Options{MaxProducers: 2, OnEvict: func(key string, recent bool) {
		fmt.Printf("evicted %s (recent %v)\n", key, recent)
	}})
	a.CheckKey("p1", 1)
	a.CheckKey("p2", 1)
	a.CheckKey("p3", 1) // evicts p1, the least recently used
	v, _ := a.Check("p1:1")
	fmt.Println(v, a.Stats().Evictions)
	// Output:
	// evicted p1 (recent true)
	// evicted p2 (recent true)
	// first-seen 2
}

func ExampleSharded() {
	a, _ := audit.NewSharded(audit.Options{}, 0) // 4 shards per CPU
	v1, _ := a.Check("ID:host-1-2-3:1:1:1:5")
	v2, _ := a.Check("ID:host-1-2-3:1:1:1:5")
	fmt.Println(v1, v2)
	// Output: first-seen duplicate
}

func ExampleAudit_MarshalBinary() {
	a, _ := audit.New(audit.Options{})
	a.CheckKey("orders", 41)
	snapshot, _ := a.MarshalBinary() // persist before shutting down

	restored, _ := audit.New(audit.Options{})
	if err := restored.UnmarshalBinary(snapshot); err != nil {
		panic(err)
	}
	fmt.Println(restored.CheckKey("orders", 41))
	// Output: duplicate
}
