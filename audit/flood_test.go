package audit_test

import (
	"fmt"
	"runtime"
	"testing"

	"github.com/acemq/msgaudit/audit"
)

func heapAfterGC() uint64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// TestProducerKeyFlood sends 100,000 distinct producer keys into an audit
// with cap 64 while 8 real producers keep sending (touched between batches
// of 32 flood keys). Memory stays bounded, every flood eviction is counted
// (as recent: the flooded producers were active within their window), and
// the real producers' duplicates are still caught. It is not parallel so
// that the heap figures are its own.
func TestProducerKeyFlood(t *testing.T) {
	const (
		flood = 100_000
		batch = 32
		real  = 8
		cap   = 64
	)
	for _, k := range kinds {
		t.Run(k.name, func(t *testing.T) {
			var callbacks, recentCallbacks int
			base := heapAfterGC()
			a := mustMake(t, k, audit.Options{MaxProducers: cap, OnEvict: func(_ string, recent bool) {
				callbacks++
				if recent {
					recentCallbacks++
				}
			}})
			seq := make([]uint64, real)
			missed, caught := 0, 0
			var early uint64
			for f := 0; f < flood; f++ {
				if _, err := a.Check(fmt.Sprintf("ID:flood-%d-1700000000000-1:1:1:1:1", f)); err != nil {
					t.Fatal(err)
				}
				if f%batch != batch-1 {
					continue
				}
				for r := range real {
					key := fmt.Sprintf("ID:real-%d-1700000000000-1:1:1:1", r)
					seq[r]++
					a.CheckKey(key, seq[r])
					if seq[r] > 1 {
						// Redelivery of the previous batch's message.
						if a.CheckKey(key, seq[r]-1) == audit.Duplicate {
							caught++
						} else {
							missed++
						}
					}
				}
				if f == 1024-1 {
					early = heapAfterGC()
				}
			}
			end := heapAfterGC()
			st := a.Stats()
			used := int64(end) - int64(base)
			grew := int64(end) - int64(early)
			t.Logf("%s: heap %d KiB for the audit after %d flood keys (%d B/producer), %+d B since 1024 keys; evictions %d (recent %d); real duplicates caught %d, missed %d",
				k.name, used>>10, flood, used/cap, grew, st.Evictions, st.RecentEvictions, caught, missed)
			if st.Producers != cap || a.Len() != cap {
				t.Fatalf("tracking %d producers, cap %d", a.Len(), cap)
			}
			// Every insert beyond the cap evicts one producer; a real
			// producer that was evicted comes back as a new insert.
			if want := uint64(flood + real - cap + missed); st.Evictions != want || uint64(callbacks) != want {
				t.Fatalf("Evictions %d, callbacks %d, want %d", st.Evictions, callbacks, want)
			}
			if st.RecentEvictions != st.Evictions || recentCallbacks != callbacks {
				t.Fatalf("RecentEvictions %d (callbacks %d) of %d: the flooded producers were active within their window", st.RecentEvictions, recentCallbacks, st.Evictions)
			}
			// A producer costs its window (depth/8 bytes, 33 words) plus a
			// few hundred bytes of LRU bookkeeping; the flood must not add
			// anything beyond the cap.
			limit := int64(cap * (2048/8 + 1024))
			if sh, ok := a.(*audit.Sharded); ok {
				limit += int64(sh.Shards()) * 1024 // an empty shard's LRU, map and padding
			}
			if used > limit {
				t.Fatalf("audit holds %d bytes after the flood, limit %d", used, limit)
			}
			if grew > 16<<10 {
				t.Fatalf("heap grew by %d bytes between 1024 and %d flood keys", grew, flood)
			}
			// 8 real producers plus 32 flood keys between two touches fit
			// in the cap: none may be evicted.
			if missed != 0 {
				t.Fatalf("missed %d real duplicates (caught %d)", missed, caught)
			}
			runtime.KeepAlive(a)
		})
	}
}
