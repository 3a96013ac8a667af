package lone_test

import (
	"context"
	"sync/atomic"
	"testing"

	"github.com/acemq/msgaudit/idempotency"
	"github.com/acemq/msgaudit/inbox"
	"github.com/acemq/msgaudit/internal/inboxsql"
	"github.com/acemq/msgaudit/receiver"
)

// warmup deliveries run before the timer starts: connections dialled,
// statements prepared, the Group's pools filled.
const warmup = 20

// settled fails t unless res is the acknowledgement of a new delivery
// whose handler ran.
func settled(t testing.TB, key string, res receiver.Result) {
	t.Helper()
	if res.Action != receiver.Ack || !res.Ran || res.Duplicate {
		t.Fatalf("delivery %s: action %v, ran %v, duplicate %v, reason %q, verdict %q, err %v",
			key, res.Action, res.Ran, res.Duplicate, res.Reason, res.Trace, res.Err)
	}
}

// BenchmarkLone is the latency of one lone delivery through a receiver on
// an idempotency store, from Process to the store's confirm, with the
// store calls grouped (the default) or not (StoreBatch 1). See the package
// documentation for how to read it.
func BenchmarkLone(b *testing.B) {
	for _, st := range storeTargets {
		for _, mode := range modes {
			b.Run(st.name+"/"+mode, func(b *testing.B) {
				cs := &counting{BatchStore: st.open(b)}
				r, ctx := newReceiver(b, cs, nil, nil, storeBatch(mode))
				var runs atomic.Int64
				h := func(context.Context, *receiver.Message) error { runs.Add(1); return nil }
				ks := newKeys()
				deliver := func() {
					k := ks.next()
					settled(b, k, r.Process(ctx, message(k), h))
				}
				for range warmup {
					deliver()
				}
				before := cs.counts()
				n := 0
				b.ReportAllocs()
				for b.Loop() {
					deliver()
					n++
				}
				b.StopTimer()
				d := cs.counts().sub(before)
				if got := runs.Load(); got != int64(warmup+n) {
					b.Fatalf("handler ran %d times for %d deliveries", got, warmup+n)
				}
				b.ReportMetric(float64(d.single+d.batches)/float64(n), "storecalls/op")
				if d.batches > 0 {
					b.ReportMetric(float64(d.batchKeys)/float64(d.batches), "keys/batch")
				}
			})
		}
	}
}

// BenchmarkLoneStoreCalls splits what BenchmarkLone's grouped mode adds:
// one op is a try-claim and a confirm of a new key sent straight to the
// store, without a receiver or idempotency.Group, as batch calls of one
// key (batch, what Group sends for a lone delivery) or as the single-key
// calls (single, what StoreBatch 1 sends). batch − single is what the
// batch statements cost a lone key; the rest of BenchmarkLone's grouped −
// single is Group's hand-off to its batching goroutine and back.
func BenchmarkLoneStoreCalls(b *testing.B) {
	for _, st := range storeTargets {
		for _, mode := range []string{"batch", single} {
			b.Run(st.name+"/"+mode, func(b *testing.B) {
				s := st.open(b)
				ctx := context.Background()
				ks := newKeys()
				keys := make([]idempotency.Key, 1)
				res := make([]idempotency.ClaimResult, 1)
				claims := make([]idempotency.Claim, 1)
				errs := make([]error, 1)
				pair := func() {
					k := idempotency.Key{Namespace: queue, ID: ks.next()}
					if mode == single {
						out, c, err := s.TryClaim(ctx, k)
						if err != nil || out != idempotency.Claimed {
							b.Fatalf("TryClaim(%s) = %v, %v", k.ID, out, err)
						}
						if err := s.Confirm(ctx, c); err != nil {
							b.Fatalf("Confirm(%s): %v", k.ID, err)
						}
						return
					}
					keys[0] = k
					if err := s.TryClaimBatch(ctx, keys, res); err != nil || res[0].Err != nil || res[0].Outcome != idempotency.Claimed {
						b.Fatalf("TryClaimBatch(%s) = %+v, %v", k.ID, res[0], err)
					}
					claims[0] = res[0].Claim
					if err := s.ConfirmBatch(ctx, claims, errs); err != nil || errs[0] != nil {
						b.Fatalf("ConfirmBatch(%s): %v, %v", k.ID, err, errs[0])
					}
				}
				for range warmup {
					pair()
				}
				b.ReportAllocs()
				for b.Loop() {
					pair()
				}
			})
		}
	}
}

// BenchmarkLoneInbox is the latency of one lone delivery through a
// receiver on the transactional inbox, from Process to the COMMIT covering
// it, with the inbox's batching at its defaults or off (MaxBatch 1).
func BenchmarkLoneInbox(b *testing.B) {
	for _, it := range inboxTargets {
		for _, mode := range modes {
			b.Run(it.name+"/"+mode, func(b *testing.B) {
				m := new(receiver.Metrics)
				ib, wrap := it.open(b, inbox.Options{MaxBatch: inboxMaxBatch(mode), Metrics: m})
				ib.SizeLanes(concurrency)
				r, ctx := newReceiver(b, nil, []receiver.Selector{ib}, m, 0)
				var runs, noTx atomic.Int64
				h := wrap(func(_ *receiver.Message, inTx bool) {
					runs.Add(1)
					if !inTx {
						noTx.Add(1)
					}
				})
				ks := newKeys()
				deliver := func() {
					k := ks.next()
					settled(b, k, r.Process(ctx, message(k), h))
				}
				for range warmup {
					deliver()
				}
				calls0 := m.StoreCalls.Load()
				commits0, members0 := ib.Batches()
				n := 0
				b.ReportAllocs()
				for b.Loop() {
					deliver()
					n++
				}
				b.StopTimer()
				if got := runs.Load(); got != int64(warmup+n) || noTx.Load() != 0 {
					b.Fatalf("handler ran %d times (%d without a transaction) for %d deliveries", got, noTx.Load(), warmup+n)
				}
				commits, members := ib.Batches()
				b.ReportMetric(float64(m.StoreCalls.Load()-calls0)/float64(n), "dbcalls/op")
				if commits > commits0 {
					b.ReportMetric(float64(members-members0)/float64(commits-commits0), "msgs/commit")
				}
			})
		}
	}
}

// TestLoneSettles runs every configuration of the benchmarks for a few
// deliveries, one at a time, and checks that each was handled once and
// settled: the same receiver and a fresh one on the same store (a
// restarted consumer) reject a redelivery as a duplicate without running
// the handler. It also checks that each mode is what it claims: grouped
// sends batch calls of one key (a lone batch), single the store's
// single-key calls; the inbox commits each delivery alone, with its
// defaults (DefaultMaxBatch, DefaultLinger) or MaxBatch 1.
func TestLoneSettles(t *testing.T) {
	const deliveries = 5
	for _, st := range storeTargets {
		for _, mode := range modes {
			t.Run("store/"+st.name+"/"+mode, func(t *testing.T) {
				cs := &counting{BatchStore: st.open(t)}
				r, ctx := newReceiver(t, cs, nil, nil, storeBatch(mode))
				fresh, fctx := newReceiver(t, cs, nil, nil, storeBatch(mode))
				y := newTally()
				h := func(_ context.Context, m *receiver.Message) error { y.handle(m, true); return nil }
				// What the store is sent for a new key (try-claim and
				// confirm) and for a confirmed one (try-claim).
				wantNew, wantDup := counts{single: 2}, counts{single: 1}
				if mode == grouped {
					wantNew, wantDup = counts{batches: 2, batchKeys: 2}, counts{batches: 1, batchKeys: 1}
				}
				ks := newKeys()
				for range deliveries {
					k := ks.next()
					before := cs.counts()
					settled(t, k, r.Process(ctx, message(k), h))
					if got := cs.counts().sub(before); got != wantNew {
						t.Errorf("%s: store calls %+v, want %+v", k, got, wantNew)
					}
					if runs, _ := y.get(k); runs != 1 {
						t.Fatalf("%s: handler ran %d times", k, runs)
					}
					if res := r.Process(ctx, message(k), h); res.Action != receiver.Ack || !res.Duplicate || res.Ran {
						t.Errorf("%s again: action %v, duplicate %v, ran %v, want an acknowledged duplicate", k, res.Action, res.Duplicate, res.Ran)
					}
					before = cs.counts()
					res := fresh.Process(fctx, message(k), h)
					if res.Action != receiver.Ack || !res.Duplicate || res.Ran || res.Reason != "store" {
						t.Errorf("%s to a fresh receiver: action %v, duplicate %v, ran %v, reason %q, want a duplicate the store rejected",
							k, res.Action, res.Duplicate, res.Ran, res.Reason)
					}
					if got := cs.counts().sub(before); got != wantDup {
						t.Errorf("%s to a fresh receiver: store calls %+v, want %+v", k, got, wantDup)
					}
					if runs, _ := y.get(k); runs != 1 {
						t.Fatalf("%s: handler ran %d times after the redeliveries", k, runs)
					}
				}
			})
		}
	}
	for _, it := range inboxTargets {
		for _, mode := range modes {
			t.Run("inbox/"+it.name+"/"+mode, func(t *testing.T) {
				ib, wrap := it.open(t, inbox.Options{MaxBatch: inboxMaxBatch(mode)})
				ib.SizeLanes(concurrency)
				wantBatch, wantLinger := inboxsql.DefaultMaxBatch, inboxsql.DefaultLinger
				if mode == single {
					wantBatch = 1
				}
				if ib.MaxBatch() != wantBatch || (mode == grouped && ib.Linger() != wantLinger) {
					t.Fatalf("MaxBatch %d, Linger %v; want %d, %v", ib.MaxBatch(), ib.Linger(), wantBatch, wantLinger)
				}
				r, ctx := newReceiver(t, nil, []receiver.Selector{ib}, nil, 0)
				fresh, fctx := newReceiver(t, nil, []receiver.Selector{ib}, nil, 0)
				y := newTally()
				h := wrap(y.handle)
				ks := newKeys()
				for range deliveries {
					k := ks.next()
					m := message(k)
					c0, d0 := ib.Batches()
					settled(t, k, r.Process(ctx, m, h))
					if c1, d1 := ib.Batches(); c1-c0 != 1 || d1-d0 != 1 {
						t.Errorf("%s: %d commits covering %d deliveries, want one commit of one", k, c1-c0, d1-d0)
					}
					if runs, noTx := y.get(k); runs != 1 || noTx != 0 {
						t.Fatalf("%s: handler ran %d times (%d runs without a transaction)", k, runs, noTx)
					}
					if ok, err := ib.Contains(context.Background(), ib.Namespace(m), k); err != nil || !ok {
						t.Errorf("%s: recorded %v, %v; want the key committed", k, ok, err)
					}
					if res := r.Process(ctx, message(k), h); res.Action != receiver.Ack || !res.Duplicate || res.Ran {
						t.Errorf("%s again: action %v, duplicate %v, ran %v, want an acknowledged duplicate", k, res.Action, res.Duplicate, res.Ran)
					}
					res := fresh.Process(fctx, message(k), h)
					if res.Action != receiver.Ack || !res.Duplicate || res.Ran || res.Reason != "inbox" {
						t.Errorf("%s to a fresh receiver: action %v, duplicate %v, ran %v, reason %q, want a duplicate the inbox rejected",
							k, res.Action, res.Duplicate, res.Ran, res.Reason)
					}
					if runs, _ := y.get(k); runs != 1 {
						t.Fatalf("%s: handler ran %d times after the redeliveries", k, runs)
					}
				}
			})
		}
	}
}
