package msgid_test

import (
	"errors"
	"fmt"

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
