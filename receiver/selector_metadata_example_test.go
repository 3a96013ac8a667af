package receiver_test

import (
	"context"
	"fmt"

	"github.com/acemq/msgaudit/metadata"
	"github.com/acemq/msgaudit/receiver"
)

// Spring's compareValues example: key = file name, value = line number. A
// line at or below the stored one is a duplicate; a higher one is processed
// and becomes the stored mark (atomically, so competing consumers never
// both take a line). With a durable store (metadata.Open("sqlite:…"),
// "redis://…", "postgres://…") a restarted consumer skips the lines already
// done, with one stored value per file rather than one per line.
func ExampleMetadataSelector_compareValues() {
	store := metadata.NewMemory()
	sel, _ := receiver.NewMetadataSelector(store, receiver.MetadataOptions{
		Key:     receiver.KeyFunc(receiver.HeaderValue("file")),
		Value:   receiver.IntHeader("line"),
		Compare: receiver.IntGreater, // accept when new > old
	})
	r, err := receiver.New(receiver.Config{Selectors: []receiver.Selector{sel}})
	if err != nil {
		panic(err)
	}
	handle := r.Wrap(func(ctx context.Context, m *receiver.Message) error {
		fmt.Println("processing", m.Header("file"), "line", m.Header("line"))
		return nil
	})

	for i, line := range []string{"1", "2", "2", "1", "3"} {
		m := &receiver.Message{Key: fmt.Sprint("ID:tail:", i), Destination: "/queue/lines",
			Headers: map[string]string{"file": "orders.csv", "line": line}}
		if err := handle(context.Background(), m); err != nil {
			fmt.Println("skipped line", line+":", err)
		}
	}
	mark, _, _ := store.Get(context.Background(), "orders.csv")
	fmt.Println("stored mark:", mark)
	// Output:
	// processing orders.csv line 1
	// processing orders.csv line 2
	// skipped line 2: receiver: duplicate delivery
	// skipped line 1: receiver: duplicate delivery
	// processing orders.csv line 3
	// stored mark: 3
}
