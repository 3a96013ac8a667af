package natsconsumer

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/acemq/msgaudit/internal/testkit/testwait"
	"github.com/acemq/msgaudit/receiver"
	"github.com/nats-io/nats.go/jetstream"
)

// BenchmarkConsume measures consuming b.N messages already in a stream,
// end to end against the server of MSGAUDIT_NATS_URL: a bare jetstream
// pull consumer that acknowledges each message (Fetch of up to 32, Ack),
// and this package's consumer with the in-process tiers only, four
// handlers and 32 deliveries in flight. The handlers only count. The
// consumer asks only for the places its handlers freed, so it makes more
// and smaller pull requests than the bare client: that is the price of
// never holding a message in a buffer while its AckWait runs.
func BenchmarkConsume(b *testing.B) {
	for _, kind := range []string{"bare", "natsconsumer"} {
		b.Run(kind, func(b *testing.B) {
			e := newEnv(b, 0)
			n := b.N
			for i := range n {
				e.publish(strconv.Itoa(i), "")
			}
			var done atomic.Int64
			b.ResetTimer()
			switch kind {
			case "bare":
				ctx := testwait.Context(b, testwait.Long)
				cons, err := e.js.CreateOrUpdateConsumer(ctx, e.stream, jetstream.ConsumerConfig{Durable: e.consumer,
					AckPolicy: jetstream.AckExplicitPolicy})
				if err != nil {
					b.Fatal(err)
				}
				for done.Load() < int64(n) {
					batch, err := cons.Fetch(int(min(32, int64(n)-done.Load())), jetstream.FetchMaxWait(time.Second))
					if err != nil {
						b.Fatal(err)
					}
					for m := range batch.Messages() {
						if err := m.Ack(); err != nil {
							b.Fatal(err)
						}
						done.Add(1)
					}
				}
			case "natsconsumer":
				cfg := e.config(e.url, func(context.Context, *receiver.Message) error {
					done.Add(1)
					return nil
				})
				cfg.Concurrency, cfg.InFlight = 4, 32
				cfg.Pipeline.MemoryOnly = true
				c, err := New(cfg)
				if err != nil {
					b.Fatal(err)
				}
				ctx, cancel := context.WithCancel(context.Background())
				errc := make(chan error, 1)
				go func() { errc <- c.Run(ctx) }()
				testwait.Until(b, 5*time.Minute, "every message handled", func() bool { return done.Load() >= int64(n) })
				b.StopTimer()
				cancel()
				if err, _ := testwait.Recv(b, errc, time.Minute, "Run's return"); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			b.ReportMetric(float64(n)/b.Elapsed().Seconds(), "msgs/s")
		})
	}
}
