package rabbitconsumer

import (
	"context"
	"strconv"
	"testing"

	"github.com/acemq/msgaudit/idempotency"
	amqp "github.com/rabbitmq/amqp091-go"
)

// BenchmarkHandle measures the consumer's per-delivery work without a
// broker: message conversion, the pipeline (memory tier, and the memory
// idempotency store for store=memory) and the ack, for new messages and
// for duplicates.
func BenchmarkHandle(b *testing.B) {
	for _, store := range []string{"none", "memory"} {
		for _, kind := range []string{"new", "duplicate"} {
			b.Run("store="+store+"/delivery="+kind, func(b *testing.B) {
				g := newRig(b, nopHandler, func(c *Config) {
					c.Pipeline.Logger = nil // discard: measure the work, not a text log
					if store == "memory" {
						c.Pipeline.Store = memStore(b, idempotency.Options{})
					}
				})
				ids := make([]string, 4096)
				for i := range ids {
					ids[i] = "msg-" + strconv.Itoa(i)
				}
				if kind == "duplicate" {
					for _, id := range ids {
						g.deliver(amqp.Delivery{MessageId: id})
					}
				}
				g.g = g.generation(2, nopAcker{})
				b.ReportAllocs()
				i := 0
				for b.Loop() {
					id := ids[i%len(ids)]
					if kind == "new" {
						id += "-" + strconv.Itoa(i)
					}
					tag := uint64(i + 1)
					g.g.acks.add(tag)
					g.c.handle(context.Background(), g.g, g.r, amqp.Delivery{MessageId: id, DeliveryTag: tag, Acknowledger: nopAcker{}})
					i++
				}
			})
		}
	}
}

type nopAcker struct{}

func (nopAcker) Ack(uint64, bool) error        { return nil }
func (nopAcker) Nack(uint64, bool, bool) error { return nil }
func (nopAcker) Reject(uint64, bool) error     { return nil }
