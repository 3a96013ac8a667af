package receiver_test

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/acemq/msgaudit/idempotency"
	"github.com/acemq/msgaudit/receiver"
)

// The three-line wrap for any consumer: wrap the handler, then map its
// error to the transport's action.
func ExampleWrap() {
	apply := func(ctx context.Context, m *receiver.Message) error {
		fmt.Println("applied", m.Key)
		return nil
	}
	h := receiver.Wrap(apply, receiver.WithMaxAttempts(3))

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
	store := idempotency.NewMemory(idempotency.Options{})
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
	fmt.Println(res.Action, res.Verdict)

	after, _ := receiver.New(receiver.Config{Store: store}) // restarted process
	res = after.Process(context.Background(), m(), handle)
	fmt.Println(res.Action, "duplicate:", res.Duplicate, res.Reason, "handler runs:", runs)
	// Output:
	// requeue handler-error attempt 1
	// ack memory:untracked store:claimed
	// ack duplicate: true store handler runs: 2
}

// A transport's workers: eight deliveries go through Process at once (their
// claims made together), two handlers run at once. When the connection is
// lost the transport closes abandon: a delivery still waiting for a handler
// slot gives up, rolled back, and the transport sends nothing for it.
func ExampleWithAdmission() {
	store := idempotency.NewMemory(idempotency.Options{})
	defer store.Close()
	r, _ := receiver.New(receiver.Config{Store: store, Handlers: 2})
	abandon := make(chan struct{}) // closed when the connection is lost
	ctx := receiver.WithAdmission(context.Background(), receiver.NewGate(2), abandon)

	var wg sync.WaitGroup
	var mu sync.Mutex
	acked := 0
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			m := &receiver.Message{Key: fmt.Sprintf("ID:p:%d", w+1), Destination: "/queue/orders"}
			if res := r.Process(ctx, m, func(context.Context, *receiver.Message) error { return nil }); res.Action == receiver.Ack {
				mu.Lock()
				acked++
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	fmt.Println("acknowledged:", acked)

	close(abandon) // the connection is gone
	res := r.Process(ctx, &receiver.Message{Key: "ID:p:9", Destination: "/queue/orders"}, func(context.Context, *receiver.Message) error { return nil })
	fmt.Println(res.Action, res.Reason, "ran:", res.Ran, errors.Is(res.Err, receiver.ErrAbandoned))
	// Output:
	// acknowledged: 8
	// requeue abandoned ran: false true
}
