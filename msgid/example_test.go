package msgid_test

import (
	"errors"
	"fmt"
	"time"

	"github.com/acemq/msgaudit/msgid"
)

func ExampleSplit() {
	key, seq, err := msgid.Split("ID:host-41234-1700000000000-1:1:1:1:42")
	fmt.Println(key, seq, err)

	_, _, err = msgid.Split("abc:007") // leading zeros: not canonical
	fmt.Println(errors.Is(err, msgid.ErrMalformed), err)
	// Output:
	// ID:host-41234-1700000000000-1:1:1:1 42 <nil>
	// true msgid: malformed id: "abc:007"
}

func ExampleGenerator() {
	clock := func() time.Time { return time.UnixMilli(1700000000000) }
	g := msgid.NewGenerator(msgid.GeneratorOptions{Host: "host", Port: 41234, Clock: clock})
	p := g.NewProducer()
	fmt.Println(p.Key())
	fmt.Println(p.Next())
	fmt.Println(p.Next())
	fmt.Println(g.NewProducer().Next())
	// Output:
	// ID:host-41234-1700000000000-0:1
	// ID:host-41234-1700000000000-0:1:1
	// ID:host-41234-1700000000000-0:1:2
	// ID:host-41234-1700000000000-0:2:1
}
