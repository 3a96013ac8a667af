package idempotency_test

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/acemq/msgaudit/idempotency"
)

// handle applies the consumer rule to one delivery and returns what to do
// with it: "ack" or "requeue".
func handle(ctx context.Context, s idempotency.Store, key idempotency.Key, work func() error) string {
	outcome, claim, err := s.TryClaim(ctx, key)
	switch {
	case err != nil:
		return "requeue" // the store could not answer: never guess
	case outcome == idempotency.AlreadyConfirmed:
		return "ack" // finished before: a duplicate
	case outcome == idempotency.InProgress:
		return "requeue" // someone else holds it; the outcome is unknown
	}
	if err := work(); err != nil {
		// If Release fails, the claim lapses after ClaimTTL; requeue either way.
		_ = s.Release(ctx, claim)
		return "requeue"
	}
	if err := s.Confirm(ctx, claim); err != nil {
		// The lease lapsed (ErrClaimLost) or the store failed: the work
		// may run again, so do not acknowledge.
		return "requeue"
	}
	return "ack"
}

// Example shows the consumer rule: acknowledge AlreadyConfirmed, requeue
// InProgress, confirm on success, release on failure.
func Example() {
	ctx := context.Background()
	store, err := idempotency.NewMemory(idempotency.Options{})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer store.Close()
	key := idempotency.Key{Namespace: "orders", ID: "ID:host-1-2:1:1:7"}

	// A first delivery fails: the claim is released, the message requeued.
	fmt.Println("1st:", handle(ctx, store, key, func() error { return errors.New("db down") }))

	// The redelivery succeeds: confirmed, acknowledged.
	fmt.Println("2nd:", handle(ctx, store, key, func() error { fmt.Println("  work runs"); return nil }))

	// A duplicate delivery: already confirmed, acknowledged without work.
	fmt.Println("dup:", handle(ctx, store, key, func() error { fmt.Println("  work runs again!"); return nil }))

	// While one consumer holds a claim, a concurrent delivery is requeued.
	other := idempotency.Key{Namespace: "orders", ID: "ID:host-1-2:1:1:8"}
	_, held, _ := store.TryClaim(ctx, other)
	fmt.Println("concurrent:", handle(ctx, store, other, func() error { return nil }))
	_ = store.Confirm(ctx, held)
	// Output:
	// 1st: requeue
	//   work runs
	// 2nd: ack
	// dup: ack
	// concurrent: requeue
}

// ExampleGroup shows concurrent deliveries sharing batch calls: each
// goroutine applies the consumer rule with the single-key calls, and
// Group sends them to the store in batches.
func ExampleGroup() {
	ctx := context.Background()
	mem, err := idempotency.NewMemory(idempotency.Options{})
	if err != nil {
		fmt.Println(err)
		return
	}
	store, err := idempotency.Group(mem, idempotency.GroupOptions{MaxBatch: 64})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer store.Close()

	var wg sync.WaitGroup
	acks := make([]string, 8)
	for i := range acks {
		wg.Add(1)
		go func() {
			defer wg.Done()
			key := idempotency.Key{Namespace: "orders", ID: fmt.Sprint("ID:host-1-2:1:1:", i)}
			acks[i] = handle(ctx, store, key, func() error { return nil })
		}()
	}
	wg.Wait()
	fmt.Println(acks)
	// Output:
	// [ack ack ack ack ack ack ack ack]
}
