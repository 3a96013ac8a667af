package audit_test

import (
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/acemq/msgaudit/audit"
	"github.com/acemq/msgaudit/internal/testkit/testwait"
)

// TestConcurrentExactNew has many goroutines mark distinct ids (one
// producer each) and overlapping ids (shared producers, each goroutine in
// its own order) while others read and roll back unrelated producers: each
// id must be FirstSeen exactly once.
func TestConcurrentExactNew(t *testing.T) {
	t.Parallel()
	const (
		workers = 8
		shared  = 4
		seqs    = 1000
	)
	for _, k := range kinds {
		if !k.concurrent {
			continue
		}
		t.Run(k.name, func(t *testing.T) {
			t.Parallel()
			a := mustMake(t, k, audit.Options{MaxProducers: workers + shared + 1})
			var fresh, dups atomic.Int64
			var bad atomic.Value
			var wg sync.WaitGroup
			stop := make(chan struct{})
			stopOnce := sync.OnceFunc(func() { close(stop) })
			defer stopOnce() // a failed wait still ends the readers
			// Readers and an unrelated rollback producer, to race every
			// method against the checks.
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := uint64(0); ; i++ {
					select {
					case <-stop:
						return
					default:
					}
					a.CheckKey("other", i%seqs)
					a.RollbackKey("other", i%seqs)
					_ = a.Rollback(fmt.Sprintf("other:%d", i%seqs))
					_, _ = a.IsInOrder("other:1")
					_, _ = a.LastSeq("shared-1")
					_ = a.Len()
					_ = a.Depth()
					_ = a.MaxProducers()
					_ = a.Stats()
					if i%64 == 0 {
						if _, err := a.MarshalBinary(); err != nil {
							bad.Store(err.Error())
						}
					}
				}
			}()
			var workersWG sync.WaitGroup
			for w := range workers {
				workersWG.Add(1)
				go func() {
					defer workersWG.Done()
					r := rand.New(rand.NewPCG(uint64(w), 1))
					type id struct {
						key string
						seq uint64
					}
					var ids []id
					for s := 1; s <= seqs; s++ {
						ids = append(ids, id{fmt.Sprintf("own-%d", w), uint64(s)})
						for p := range shared {
							ids = append(ids, id{fmt.Sprintf("shared-%d", p), uint64(s)})
						}
					}
					r.Shuffle(len(ids), func(i, j int) { ids[i], ids[j] = ids[j], ids[i] })
					for i, x := range ids {
						var v audit.Sighting
						if i%2 == 0 {
							var err error
							if v, err = a.Check(fmt.Sprintf("%s:%d", x.key, x.seq)); err != nil {
								bad.Store(err.Error())
							}
						} else {
							v = a.CheckKey(x.key, x.seq)
						}
						switch v {
						case audit.FirstSeen:
							fresh.Add(1)
						case audit.Duplicate:
							dups.Add(1)
						default:
							bad.Store(fmt.Sprintf("%s:%d: %v", x.key, x.seq, v))
						}
					}
				}()
			}
			testwait.Group(t, &workersWG, testwait.Long, fmt.Sprintf("the end of the %d checking workers", workers))
			stopOnce()
			testwait.Group(t, &wg, testwait.Long, "the end of the reader and rollback goroutine after stop")
			if b := bad.Load(); b != nil {
				t.Fatal(b)
			}
			if got, want := fresh.Load(), int64(workers*seqs+shared*seqs); got != want {
				t.Fatalf("%d FirstSeen sightings, want %d", got, want)
			}
			if got, want := dups.Load(), int64((workers-1)*shared*seqs); got != want {
				t.Fatalf("%d Duplicate sightings, want %d", got, want)
			}
		})
	}
}

// TestConcurrentChurn races every method, including Clear, SetDepth,
// SetMaxProducers and UnmarshalBinary, against checks of more producers than
// the cap. Afterwards the counters add up, the cap holds, and (Sharded) no
// budget slot was leaked: filling the audit reaches exactly the cap.
func TestConcurrentChurn(t *testing.T) {
	t.Parallel()
	for _, k := range kinds {
		if !k.concurrent {
			continue
		}
		t.Run(k.name, func(t *testing.T) {
			t.Parallel()
			var evicted atomic.Int64
			a := mustMake(t, k, audit.Options{Depth: 128, MaxProducers: 8, OnEvict: func(string, bool) { evicted.Add(1) }})
			// Depth 64 and cap 1 are within every limit the setters below
			// choose: a snapshot never raises them.
			snapshot, _ := mustMake(t, k, audit.Options{Depth: 64, MaxProducers: 1}).MarshalBinary()
			var wg sync.WaitGroup
			for w := range 6 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					r := rand.New(rand.NewPCG(uint64(w), 2))
					for i := range 3000 {
						key := fmt.Sprintf("p%d", r.IntN(40))
						switch op := r.IntN(100); {
						case op < 80:
							_, _ = a.Check(fmt.Sprintf("%s:%d", key, r.IntN(500)))
						case op < 85:
							a.RollbackKey(key, uint64(r.IntN(500)))
						case op < 88:
							_ = a.SetMaxProducers(1 + r.IntN(12))
						case op < 90:
							_ = a.SetDepth(64 * (1 + r.IntN(4)))
						case op < 91:
							a.Clear()
						case op < 92:
							if err := a.UnmarshalBinary(snapshot); err != nil {
								t.Error(err)
							}
						case op < 94:
							if _, err := a.MarshalBinary(); err != nil {
								t.Error(err)
							}
						default:
							_ = a.Stats()
							_ = a.Len()
							_, _ = a.LastSeq(key)
							_, _ = a.IsInOrder(fmt.Sprintf("%s:%d", key, i))
						}
					}
				}()
			}
			testwait.Group(t, &wg, testwait.Long, "the end of the 6 churning goroutines")
			st := a.Stats()
			if st.Checks != st.FirstSeen+st.Duplicates+st.TooOld+st.Malformed+st.TooLong {
				t.Fatalf("counters do not add up: %+v", st)
			}
			if st.Evictions != uint64(evicted.Load()) {
				t.Fatalf("Evictions %d, OnEvict called %d times", st.Evictions, evicted.Load())
			}
			if a.Len() > a.MaxProducers() {
				t.Fatalf("Len %d above cap %d", a.Len(), a.MaxProducers())
			}
			if err := a.SetMaxProducers(10); err != nil {
				t.Fatal(err)
			}
			for i := range 30 {
				a.CheckKey(fmt.Sprintf("fill-%d", i), 1)
			}
			if a.Len() != 10 {
				t.Fatalf("Len %d after filling cap 10", a.Len())
			}
		})
	}
}
