package receiver_test

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/acemq/msgaudit/idempotency"
	"github.com/acemq/msgaudit/receiver"
)

// batchCounter is an idempotency.BatchStore over a Memory that records
// the size of every batch call and counts the single-key calls.
type batchCounter struct {
	*idempotency.Memory
	mu     sync.Mutex
	sizes  map[string][]int
	single map[string]int
}

func newBatchCounter(tb testing.TB) *batchCounter {
	return &batchCounter{Memory: memStore(tb, idempotency.Options{}), sizes: map[string][]int{}, single: map[string]int{}}
}

func (b *batchCounter) note(m string, n int) {
	b.mu.Lock()
	b.sizes[m] = append(b.sizes[m], n)
	b.mu.Unlock()
}

func (b *batchCounter) calls(m string) []int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]int(nil), b.sizes[m]...)
}

func (b *batchCounter) singles(m string) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.single[m]
}

func (b *batchCounter) TryClaim(ctx context.Context, k idempotency.Key) (idempotency.Outcome, idempotency.Claim, error) {
	b.mu.Lock()
	b.single["TryClaim"]++
	b.mu.Unlock()
	return b.Memory.TryClaim(ctx, k)
}

func (b *batchCounter) TryClaimBatch(ctx context.Context, keys []idempotency.Key, res []idempotency.ClaimResult) error {
	b.note("TryClaimBatch", len(keys))
	return b.Memory.TryClaimBatch(ctx, keys, res)
}

func (b *batchCounter) ConfirmBatch(ctx context.Context, claims []idempotency.Claim, errs []error) error {
	b.note("ConfirmBatch", len(claims))
	return b.Memory.ConfirmBatch(ctx, claims, errs)
}

func (b *batchCounter) ReleaseBatch(ctx context.Context, claims []idempotency.Claim, errs []error) error {
	b.note("ReleaseBatch", len(claims))
	return b.Memory.ReleaseBatch(ctx, claims, errs)
}

func TestStoreBatchConfig(t *testing.T) {
	t.Parallel()
	for _, cfg := range []receiver.Config{
		{Store: newBatchCounter(t), StoreBatch: -1},
		{Store: newBatchCounter(t), StoreLinger: -time.Millisecond},
	} {
		if _, err := receiver.New(cfg); !errors.Is(err, receiver.ErrConfig) {
			t.Errorf("New with StoreBatch %d, StoreLinger %v: %v, want ErrConfig", cfg.StoreBatch, cfg.StoreLinger, err)
		}
	}
}

// TestStoreBatchGroups: the claims and confirms of concurrent deliveries
// reach a BatchStore as batch calls.
func TestStoreBatchGroups(t *testing.T) {
	t.Parallel()
	const n = 10
	st := newBatchCounter(t)
	// A long linger and a batch of n: the n deliveries' claims go as one
	// batch, and so do their confirms, whatever the scheduling.
	r, err := receiver.New(receiver.Config{Store: st, StoreBatch: n, StoreLinger: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	results := make([]receiver.Result, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i] = r.Process(bg, msg("ID:grp:"+strconv.Itoa(i)), okHandler)
		}()
	}
	wg.Wait()
	for i, res := range results {
		if res.Action != receiver.Ack {
			t.Fatalf("delivery %d: %+v", i, res)
		}
		ok, err := st.IsConfirmed(bg, idempotency.Key{Namespace: queue, ID: "ID:grp:" + strconv.Itoa(i)})
		if err != nil || !ok {
			t.Fatalf("delivery %d confirmed = %v, %v", i, ok, err)
		}
	}
	for _, m := range []string{"TryClaimBatch", "ConfirmBatch"} {
		if got := st.calls(m); len(got) != 1 || got[0] != n {
			t.Errorf("%s calls = %v, want one of %d", m, got, n)
		}
	}
	if got := st.singles("TryClaim"); got != 0 {
		t.Errorf("%d single TryClaim calls went around the group", got)
	}
}

// TestStoreBatchOff: StoreBatch 1 sends every call on its own.
func TestStoreBatchOff(t *testing.T) {
	t.Parallel()
	st := newBatchCounter(t)
	r, err := receiver.New(receiver.Config{Store: st, StoreBatch: 1})
	if err != nil {
		t.Fatal(err)
	}
	if res := r.Process(bg, msg("ID:off:1"), okHandler); res.Action != receiver.Ack {
		t.Fatal(res)
	}
	if got := st.calls("TryClaimBatch"); len(got) != 0 || st.singles("TryClaim") != 1 {
		t.Fatalf("with StoreBatch 1: batch calls %v, single TryClaims %d; want none and 1", got, st.singles("TryClaim"))
	}
}

// gatedBatchStore holds its TryClaimBatch calls until gate closes.
type gatedBatchStore struct {
	*batchCounter
	entered  chan struct{}
	gate     chan struct{}
	released chan struct{}
}

func (g *gatedBatchStore) TryClaimBatch(ctx context.Context, keys []idempotency.Key, res []idempotency.ClaimResult) error {
	g.entered <- struct{}{}
	<-g.gate
	return g.batchCounter.TryClaimBatch(ctx, keys, res)
}

func (g *gatedBatchStore) ReleaseBatch(ctx context.Context, claims []idempotency.Claim, errs []error) error {
	err := g.batchCounter.ReleaseBatch(ctx, claims, errs)
	g.released <- struct{}{}
	return err
}

// TestStoreBatchAbandonedDelivery: a delivery whose context ends while
// its grouped claim waits is requeued at once, and the claim the batch
// then takes for it is released: the redelivery can claim the key.
func TestStoreBatchAbandonedDelivery(t *testing.T) {
	t.Parallel()
	st := &gatedBatchStore{batchCounter: newBatchCounter(t), entered: make(chan struct{}, 1),
		gate: make(chan struct{}), released: make(chan struct{}, 1)}
	r, err := receiver.New(receiver.Config{Store: st})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(bg)
	done := make(chan receiver.Result, 1)
	go func() { done <- r.Process(ctx, msg("ID:gone:1"), okHandler) }()
	recv(t, st.entered, testWait, "the grouped claim's batch call")
	cancel()
	res, _ := recv(t, done, testWait, "Process returning after its context ended")
	if res.Action != receiver.Requeue || res.Ran || !errors.Is(res.Err, context.Canceled) {
		t.Fatalf("abandoned delivery: %+v, want a requeue with context.Canceled, handler not run", res)
	}
	close(st.gate)
	recv(t, st.released, testWait, "the release of the claim taken for the abandoned delivery")
	if res := r.Process(bg, msg("ID:gone:1"), okHandler); res.Action != receiver.Ack || !res.Ran {
		t.Fatalf("redelivery: %+v, want it claimed, run and acknowledged", res)
	}
}
