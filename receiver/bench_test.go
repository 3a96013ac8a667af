package receiver_test

import (
	"context"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/acemq/msgaudit/connaudit"
	"github.com/acemq/msgaudit/idempotency"
	"github.com/acemq/msgaudit/internal/admission"
	"github.com/acemq/msgaudit/receiver"
)

// BenchmarkProcess measures one new delivery through the pipeline (and,
// for dup=true, one duplicate absorbed by memory). The memory+grouped-store
// tier sends the memory store's calls through idempotency.Group
// (StoreBatch set), one delivery at a time: Group's cost when there is
// nothing to group. handlers=0 runs without a handler gate, handlers=4
// with one (Config.Handlers and a transport's gate, both free, as for
// a transport's subscription).
func BenchmarkProcess(b *testing.B) {
	for _, tier := range []string{"memory", "memory+store", "memory+grouped-store"} {
		for _, dup := range []bool{false, true} {
			for _, handlers := range []int{0, 4} {
				name := "tier=" + tier + "/dup=" + strconv.FormatBool(dup) + "/handlers=" + strconv.Itoa(handlers)
				b.Run(name, func(b *testing.B) {
					ca, err := connaudit.New(connaudit.Options{})
					if err != nil {
						b.Fatal(err)
					}
					cfg := receiver.Config{Audit: receiver.ConnAudit(ca), Completed: 1 << 20, Handlers: handlers}
					if tier != "memory" {
						s := memStore(b, idempotency.Options{})
						defer s.Close()
						cfg.Store = s
					} else {
						cfg.MemoryOnly = true
					}
					if tier == "memory+grouped-store" {
						cfg.StoreBatch = idempotency.DefaultGroupMaxBatch
					}
					r, err := receiver.New(cfg)
					if err != nil {
						b.Fatal(err)
					}
					ctx := context.Background()
					if handlers > 0 {
						ctx = admission.With(ctx, admission.New(handlers), make(chan struct{}))
					}
					keys := make([]string, b.N)
					for i := range keys {
						keys[i] = "ID:bench-1-2-0:1:" + strconv.Itoa(i+1)
						if dup {
							r.Process(context.Background(), &receiver.Message{Key: keys[i], Destination: queue}, okHandler)
						}
					}
					m := &receiver.Message{Destination: queue}
					b.ReportAllocs()
					b.ResetTimer()
					for i := range b.N {
						m.Key = keys[i]
						if res := r.Process(ctx, m, okHandler); res.Action != receiver.Ack || res.Duplicate != dup {
							b.Fatal(res)
						}
					}
				})
			}
		}
	}
}

// slowBatchStore is an idempotency.BatchStore over a Memory that takes
// latency per call, batch or single, one call at a time: a store behind
// one connection or one writer.
type slowBatchStore struct {
	*idempotency.Memory
	latency time.Duration
	mu      sync.Mutex
}

func (s *slowBatchStore) wait() {
	s.mu.Lock()
	time.Sleep(s.latency)
	s.mu.Unlock()
}

func (s *slowBatchStore) TryClaim(ctx context.Context, k idempotency.Key) (idempotency.Outcome, idempotency.Claim, error) {
	s.wait()
	return s.Memory.TryClaim(ctx, k)
}

func (s *slowBatchStore) Confirm(ctx context.Context, c idempotency.Claim) error {
	s.wait()
	return s.Memory.Confirm(ctx, c)
}

func (s *slowBatchStore) TryClaimBatch(ctx context.Context, keys []idempotency.Key, res []idempotency.ClaimResult) error {
	s.wait()
	return s.Memory.TryClaimBatch(ctx, keys, res)
}

func (s *slowBatchStore) ConfirmBatch(ctx context.Context, claims []idempotency.Claim, errs []error) error {
	s.wait()
	return s.Memory.ConfirmBatch(ctx, claims, errs)
}

func (s *slowBatchStore) ReleaseBatch(ctx context.Context, claims []idempotency.Claim, errs []error) error {
	s.wait()
	return s.Memory.ReleaseBatch(ctx, claims, errs)
}

// BenchmarkProcessSlowStore measures new deliveries through Process from
// 32 goroutines per GOMAXPROCS (b.RunParallel) on a store taking 200µs per
// call, one at a time, with the store calls grouped (the default for a
// BatchStore) or not (StoreBatch 1). It reports deliveries/s.
func BenchmarkProcessSlowStore(b *testing.B) {
	for _, batch := range []int{1, 0} {
		b.Run("StoreBatch="+strconv.Itoa(batch), func(b *testing.B) {
			s := &slowBatchStore{Memory: memStore(b, idempotency.Options{}), latency: 200 * time.Microsecond}
			defer s.Close()
			r, err := receiver.New(receiver.Config{Store: s, StoreBatch: batch, Completed: 1 << 20})
			if err != nil {
				b.Fatal(err)
			}
			var next atomic.Uint64
			b.SetParallelism(32)
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				m := &receiver.Message{Destination: queue}
				for pb.Next() {
					m.Key = "ID:slow-1-2-0:1:" + strconv.FormatUint(next.Add(1), 10)
					if res := r.Process(context.Background(), m, okHandler); res.Action != receiver.Ack {
						b.Fatal(res)
					}
				}
			})
			b.StopTimer()
			if sec := b.Elapsed().Seconds(); sec > 0 {
				b.ReportMetric(float64(b.N)/sec, "deliveries/s")
			}
		})
	}
}
