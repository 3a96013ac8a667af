package connaudit_test

import (
	"fmt"

	"github.com/acemq/msgaudit/connaudit"
)

func Example() {
	a, err := connaudit.New(connaudit.Options{})
	if err != nil {
		panic(err)
	}
	orders, _ := connaudit.ParseDestination("/queue/orders")
	prices, _ := connaudit.ParseDestination("/topic/prices")
	id := "ID:host-41234-1700000000000-1:1:1:1:1"

	// A queue message is a duplicate whichever consumer gets it again.
	fmt.Println(a.Check("consumer-1", orders, id))
	fmt.Println(a.Check("consumer-2", orders, id))
	// Each topic subscriber gets its own copy.
	fmt.Println(a.Check("consumer-1", prices, id))
	fmt.Println(a.Check("consumer-2", prices, id))
	fmt.Println(a.Check("consumer-2", prices, id))
	// Output:
	// first-seen <nil>
	// duplicate <nil>
	// first-seen <nil>
	// first-seen <nil>
	// duplicate <nil>
}

func ExampleAudit_Rollback() {
	a, _ := connaudit.New(connaudit.Options{})
	q, _ := connaudit.ParseDestination("/queue/work")
	fmt.Println(a.IsDuplicate("c", q, "job:1"))
	// Processing failed and the message goes back to the broker: clear it
	// so the redelivery is not suppressed.
	_ = a.Rollback("c", q, "job:1")
	fmt.Println(a.IsDuplicate("c", q, "job:1"))
	// Output:
	// false
	// false
}
