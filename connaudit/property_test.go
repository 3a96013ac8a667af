package connaudit_test

import (
	"fmt"
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/acemq/msgaudit/audit"
	"github.com/acemq/msgaudit/audit/audittest"
	"github.com/acemq/msgaudit/connaudit"
	"github.com/acemq/msgaudit/internal/testkit/testwait"
	"pgregory.net/rapid"
)

var propDests = []connaudit.Destination{
	{Kind: connaudit.Queue, Name: "a"}, {Kind: connaudit.TempQueue, Name: "a"}, {Kind: connaudit.Queue, Name: "b"},
	{Kind: connaudit.Topic, Name: "a"}, {Kind: connaudit.TempTopic, Name: "t"}, {Kind: connaudit.Topic, Name: "c"},
}

// modelShared is the model's own routing rule (not Destination.IsQueue,
// so that a routing bug cannot hide itself).
func modelShared(d connaudit.Destination) bool {
	return d.Kind == connaudit.Queue || d.Kind == connaudit.TempQueue
}

// modelKey is where the reference model records a message: queues are
// shared by consumers, topics are per consumer.
func modelKey(consumer string, d connaudit.Destination, producer string) string {
	if modelShared(d) {
		return "queue|" + d.String() + "|" + producer
	}
	return "topic|" + consumer + "|" + d.String() + "|" + producer
}

// TestPropertyAgainstModel runs random traces on the connection audit and
// checks every sighting against the reference model with queue/topic
// routing: no false duplicate, no missed duplicate within the depth, TooOld
// only below the window; RemoveConsumer forgets exactly that consumer's
// topic history; a disabled audit records nothing; snapshots restore
// everything.
func TestPropertyAgainstModel(t *testing.T) {
	for _, v := range variants {
		t.Run(v.name, func(t *testing.T) {
			t.Parallel()
			rapid.Check(t, func(rt *rapid.T) {
				depth := rapid.SampledFrom([]int{64, 300, 2048}).Draw(rt, "depth")
				o := v.o
				o.Depth, o.MaxProducers = depth, 3
				a := mustNew(rt, o)
				m := audittest.NewModel(depth)
				consumers := []string{"c1", "c2", "c3"}
				producers := []string{"ID:h-1-2-3:1:1:1:1", "ID:h-1-2-3:1:1:1:2", "p"}
				his := map[string]uint64{}
				type msg struct {
					consumer string
					d        connaudit.Destination
					producer string
					seq      uint64
				}
				var history []msg
				enabled := true
				check := func(rt *rapid.T, c string, d connaudit.Destination, p string, seq uint64) {
					v, err := a.Check(c, d, fmt.Sprintf("%s:%d", p, seq))
					if err != nil {
						rt.Fatal(err)
					}
					if !enabled {
						if v != audit.FirstSeen {
							rt.Fatalf("disabled audit said %v", v)
						}
						return
					}
					k := modelKey(c, d, p)
					if err := m.Check(k, seq, v); err != nil {
						rt.Fatal(err)
					}
					if v != audit.TooOld {
						his[k] = max(his[k], seq)
					}
					history = append(history, msg{c, d, p, seq})
				}
				rt.Repeat(map[string]func(*rapid.T){
					"check": func(rt *rapid.T) {
						c := rapid.SampledFrom(consumers).Draw(rt, "consumer")
						d := rapid.SampledFrom(propDests).Draw(rt, "dest")
						p := rapid.SampledFrom(producers).Draw(rt, "producer")
						hi := his[modelKey(c, d, p)]
						var seq uint64
						switch rapid.IntRange(0, 20).Draw(rt, "shape") {
						case 0:
							seq = hi + rapid.Uint64Range(1e6, 1e12).Draw(rt, "jump")
						case 1:
							seq = math.MaxUint64 - rapid.Uint64Range(0, 5).Draw(rt, "top")
						default:
							delta := rapid.IntRange(-2*depth-100, 50).Draw(rt, "delta")
							if delta < 0 && uint64(-delta) > hi {
								seq = 0
							} else if delta < 0 {
								seq = hi - uint64(-delta)
							} else {
								seq = hi + uint64(delta)
								if seq < hi {
									seq = math.MaxUint64
								}
							}
						}
						check(rt, c, d, p, seq)
					},
					"redeliver to another consumer": func(rt *rapid.T) {
						if len(history) == 0 {
							rt.Skip("no history")
						}
						h := history[rapid.IntRange(0, len(history)-1).Draw(rt, "msg")]
						check(rt, rapid.SampledFrom(consumers).Draw(rt, "consumer"), h.d, h.producer, h.seq)
					},
					"rollback": func(rt *rapid.T) {
						if len(history) == 0 {
							rt.Skip("no history")
						}
						h := history[rapid.IntRange(0, len(history)-1).Draw(rt, "msg")]
						c := h.consumer
						if modelShared(h.d) {
							c = rapid.SampledFrom(consumers).Draw(rt, "consumer") // shared
						}
						if err := a.Rollback(c, h.d, fmt.Sprintf("%s:%d", h.producer, h.seq)); err != nil {
							rt.Fatal(err)
						}
						m.Rollback(modelKey(c, h.d, h.producer), h.seq)
					},
					"remove consumer": func(rt *rapid.T) {
						c := rapid.SampledFrom(consumers).Draw(rt, "consumer")
						a.RemoveConsumer(c)
						for k := range his {
							if strings.HasPrefix(k, "topic|"+c+"|") {
								delete(his, k)
								m.Forget(k)
							}
						}
					},
					"toggle": func(rt *rapid.T) {
						enabled = !enabled
						a.SetEnabled(enabled)
					},
					"snapshot": func(rt *rapid.T) {
						data, err := a.MarshalBinary()
						if err != nil {
							rt.Fatal(err)
						}
						b := mustNew(rt, connaudit.Options{Disabled: !enabled})
						if err := b.UnmarshalBinary(data); err != nil {
							rt.Fatal(err)
						}
						sa, sb := a.Stats(), b.Stats()
						if sa.Queues != sb.Queues || sa.Topics != sb.Topics || sa.Producers != sb.Producers {
							rt.Fatalf("restored %+v, original %+v", sb, sa)
						}
						a = b
					},
					"": func(rt *rapid.T) {
						if st := a.Stats(); st.Evictions != 0 || st.AuditEvictions != 0 {
							rt.Fatalf("unexpected evictions: %+v", st)
						}
					},
				})
			})
		})
	}
}

// TestConcurrentExactNew has goroutines acting as consumers of shared
// queues and of their own topic subscriptions, checking distinct and
// overlapping ids while others roll back, remove unrelated consumers,
// resize and snapshot: each id is FirstSeen exactly once per audit it
// belongs to.
func TestConcurrentExactNew(t *testing.T) {
	t.Parallel()
	const (
		workers = 6
		seqs    = 400
	)
	for _, v := range variants {
		t.Run(v.name, func(t *testing.T) {
			t.Parallel()
			a := mustNew(t, v.o)
			var fresh, dups atomic.Int64
			var bad atomic.Value
			stop := make(chan struct{})
			stopOnce := sync.OnceFunc(func() { close(stop) })
			defer stopOnce() // a failed wait still ends the bystander
			var bg sync.WaitGroup
			bg.Add(1)
			go func() {
				defer bg.Done()
				other := connaudit.Destination{Kind: connaudit.Topic, Name: "other"}
				for i := 0; ; i++ {
					select {
					case <-stop:
						return
					default:
					}
					a.Check("bystander", other, fmt.Sprintf("o:%d", i))
					_ = a.Rollback("bystander", other, fmt.Sprintf("o:%d", i))
					a.RemoveConsumer("bystander")
					_ = a.Stats()
					if i%50 == 0 {
						if _, err := a.MarshalBinary(); err != nil {
							bad.Store(err.Error())
						}
						if err := a.SetDepth(2048 + 64*(i%3)); err != nil {
							bad.Store(err.Error())
						}
					}
				}
			}()
			var wg sync.WaitGroup
			for w := range workers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					me := fmt.Sprintf("consumer-%d", w)
					for s := 1; s <= seqs; s++ {
						for _, c := range []struct {
							d  connaudit.Destination
							id string
						}{
							{qQ, fmt.Sprintf("shared:%d", s)},                  // every worker: New once in all
							{qQ, fmt.Sprintf("own-%d:%d", w, s)},               // New once
							{qT, fmt.Sprintf("shared:%d", s)},                  // per consumer: New once each
							{tmq, fmt.Sprintf("shared:%d", (s*7+w*13)%seqs+1)}, // overlapping, shuffled
						} {
							switch v, err := a.Check(me, c.d, c.id); {
							case err != nil:
								bad.Store(err.Error())
							case v == audit.FirstSeen:
								fresh.Add(1)
							case v == audit.Duplicate:
								dups.Add(1)
							default:
								bad.Store(fmt.Sprintf("%v %s: %v", c.d, c.id, v))
							}
						}
					}
				}()
			}
			testwait.Group(t, &wg, testwait.Long, fmt.Sprintf("the end of the %d checking workers", workers))
			stopOnce()
			testwait.Group(t, &bg, testwait.Long, "the end of the bystander goroutine after stop")
			if b := bad.Load(); b != nil {
				t.Fatal(b)
			}
			want := int64(seqs + workers*seqs + workers*seqs + seqs)
			if fresh.Load() != want || fresh.Load()+dups.Load() != int64(4*workers*seqs) {
				t.Fatalf("%d FirstSeen, %d Duplicate; want %d FirstSeen of %d", fresh.Load(), dups.Load(), want, 4*workers*seqs)
			}
		})
	}
}
