package receiver_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/acemq/msgaudit/idempotency"
	"github.com/acemq/msgaudit/receiver"
)

// The wrap for any consumer: build the receiver, wrap the handler, then
// map its error to the transport's action.
func ExampleReceiver_Wrap() {
	apply := func(ctx context.Context, m *receiver.Message) error {
		fmt.Println("applied", m.Key)
		return nil
	}
	r, err := receiver.New(receiver.Config{MemoryOnly: true, MaxAttempts: 3})
	if err != nil {
		panic(err)
	}
	h := r.Wrap(apply)

	for _, key := range []string{"ID:p:1", "ID:p:1", "ID:p:2"} {
		err := h(context.Background(), &receiver.Message{Key: key, Destination: "/queue/orders"})
		fmt.Println(key, receiver.ActionOf(err), "duplicate:", errors.Is(err, receiver.ErrDuplicate))
	}
	// Output:
	// applied ID:p:1
	// ID:p:1 ack duplicate: false
	// ID:p:1 ack duplicate: true
	// applied ID:p:2
	// ID:p:2 ack duplicate: false
}

// A consumer restart: the new receiver's memory is empty, the durable
// store remembers the finished work, so the redelivery is acknowledged
// without running the handler again.
func ExampleReceiver_Process() {
	store, err := idempotency.NewMemory(idempotency.Options{})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer store.Close()
	runs := 0
	handle := func(ctx context.Context, m *receiver.Message) error {
		runs++
		if runs == 1 {
			return errors.New("database busy")
		}
		return nil
	}
	m := func() *receiver.Message { return &receiver.Message{Key: "ID:p:7", Destination: "/queue/orders"} }

	before, _ := receiver.New(receiver.Config{Store: store})
	res := before.Process(context.Background(), m(), handle)
	fmt.Println(res.Action, res.Reason, "attempt", res.Attempt)
	res = before.Process(context.Background(), m(), handle)
	fmt.Println(res.Action, res.Trace)

	after, _ := receiver.New(receiver.Config{Store: store}) // restarted process
	res = after.Process(context.Background(), m(), handle)
	fmt.Println(res.Action, "duplicate:", res.Duplicate, res.Reason, "handler runs:", runs)
	// Output:
	// requeue handler-error attempt 1
	// ack memory:untracked store:claimed
	// ack duplicate: true store handler runs: 2
}
