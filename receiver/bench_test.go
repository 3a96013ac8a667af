package receiver_test

import (
	"context"
	"strconv"
	"testing"

	"github.com/acemq/msgaudit/connaudit"
	"github.com/acemq/msgaudit/idempotency"
	"github.com/acemq/msgaudit/receiver"
)

// BenchmarkProcess measures one new delivery through the pipeline (and,
// for dup=true, one duplicate absorbed by memory). The memory+grouped-store
// tier sends the memory store's calls through idempotency.Group
// (StoreBatch set), one delivery at a time: Group's cost when there is
// nothing to group.
func BenchmarkProcess(b *testing.B) {
	for _, tier := range []string{"memory", "memory+store", "memory+grouped-store"} {
		for _, dup := range []bool{false, true} {
			b.Run("tier="+tier+"/dup="+strconv.FormatBool(dup), func(b *testing.B) {
				ca, err := connaudit.New(connaudit.Options{})
				if err != nil {
					b.Fatal(err)
				}
				cfg := receiver.Config{Audit: receiver.ConnAudit(ca), Completed: 1 << 20}
				if tier != "memory" {
					s := idempotency.NewMemory(idempotency.Options{})
					defer s.Close()
					cfg.Store = s
				}
				if tier == "memory+grouped-store" {
					cfg.StoreBatch = idempotency.DefaultGroupMaxBatch
				}
				r, err := receiver.New(cfg)
				if err != nil {
					b.Fatal(err)
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
					if res := r.Process(context.Background(), m, okHandler); res.Action != receiver.Ack || res.Duplicate != dup {
						b.Fatal(res)
					}
				}
			})
		}
	}
}
