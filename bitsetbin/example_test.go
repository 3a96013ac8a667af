package bitsetbin_test

import (
	"fmt"

	"github.com/acemq/msgaudit/bitsetbin"
)

func ExampleBin_Mark() {
	b, _ := bitsetbin.New(128) // guaranteed depth 128
	fmt.Println(b.Mark(1000))  // first index: anchors the window with 1000 at its top
	fmt.Println(b.Mark(1000))  // a replay
	fmt.Println(b.Mark(990))   // out of order, below the first index: still tracked
	fmt.Println(b.Mark(5000))  // a jump slides the window
	fmt.Println(b.Mark(1000))  // now below the window: unknown
	b.Unmark(5000)             // rollback: the redelivery will pass
	fmt.Println(b.Mark(5000))
	// Output:
	// first-seen
	// duplicate
	// first-seen
	// first-seen
	// too-old
	// first-seen
}

func ExampleBin_DecodeFrom() {
	var a, b bitsetbin.Bin
	a.Mark(7)
	b.Mark(9)
	buf, _ := a.AppendBinary(nil)
	buf, _ = b.AppendBinary(buf) // two bins back to back

	var x, y bitsetbin.Bin
	n, _ := x.DecodeFrom(buf)
	_, err := y.DecodeFrom(buf[n:])
	fmt.Println(x.Get(7), y.Get(9), err)
	// Output: true true <nil>
}
