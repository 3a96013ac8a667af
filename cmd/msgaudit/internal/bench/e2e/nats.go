package e2e

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/acemq/msgaudit/internal/redact"
	"github.com/acemq/msgaudit/natsconsumer"
	"github.com/acemq/msgaudit/receiver"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// natsBroker is NATS JetStream.
type natsBroker struct {
	url string
	// emptyWait bounds how long verifyEmpty waits for a stream to drop
	// its acknowledged messages (natsEmptyWait in a measurement).
	emptyWait time.Duration
}

// natsTimeout bounds one request to the server (creating, inspecting or
// deleting a stream or a consumer, a flush).
const natsTimeout = 30 * time.Second

// natsEmptyWait is how long a measurement's verifyEmpty waits for a
// work-queue stream to drop the acknowledged messages: the server removes
// them after it has read the acks, not before answering the flush that
// follows them.
const natsEmptyWait = 10 * time.Second

// natsPublishWindow is how many PubAcks preload waits for at most at once
// (nats.go stalls beyond 4,000).
const natsPublishWindow = 1000

// natsStream and natsDLQStream name a measurement's streams (no '.' in a
// stream name); natsSubject and natsDLQSubject are what they capture.
func natsStream(n names) string     { return n.ident }
func natsDLQStream(n names) string  { return n.ident + "_dlq" }
func natsSubject(n names) string    { return n.queue }
func natsDLQSubject(n names) string { return n.queue + ".dlq" }

func (b *natsBroker) dial(ctx context.Context) (*nats.Conn, jetstream.JetStream, error) {
	if err := ctx.Err(); err != nil {
		return nil, nil, err
	}
	nc, err := nats.Connect(b.url, nats.Timeout(natsTimeout), nats.NoReconnect())
	if err != nil {
		return nil, nil, fmt.Errorf("connecting to %s: %w", redact.URL(b.url), err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, nil, err
	}
	return nc, js, nil
}

// preload creates the measurement's stream (file storage, work-queue
// retention: a message stays in it until a consumer acknowledges it) and
// its dead-letter stream, then publishes count messages, body(i) the i-th
// (from 0), awaiting every PubAck. Creating a stream that exists with the
// same configuration succeeds, so latency mode can call it twice.
func (b *natsBroker) preload(ctx context.Context, n names, count int, body func(i int) []byte) error {
	nc, js, err := b.dial(ctx)
	if err != nil {
		return err
	}
	defer nc.Close()
	for _, sc := range []jetstream.StreamConfig{
		{Name: natsStream(n), Subjects: []string{natsSubject(n)}, Storage: jetstream.FileStorage, Retention: jetstream.WorkQueuePolicy},
		{Name: natsDLQStream(n), Subjects: []string{natsDLQSubject(n)}, Storage: jetstream.FileStorage, Retention: jetstream.LimitsPolicy},
	} {
		rctx, cancel := context.WithTimeout(ctx, natsTimeout)
		_, err := js.CreateOrUpdateStream(rctx, sc)
		cancel()
		if err != nil {
			return fmt.Errorf("creating stream %s: %w", sc.Name, err)
		}
	}
	await := func(i int, f jetstream.PubAckFuture) error {
		select {
		case ack := <-f.Ok():
			if ack.Stream != natsStream(n) {
				return fmt.Errorf("message %d stored in stream %q, want %q", i+1, ack.Stream, natsStream(n))
			}
			return nil
		case err := <-f.Err():
			return fmt.Errorf("message %d: %w", i+1, err)
		case <-ctx.Done():
			return fmt.Errorf("PubAck of message %d: %w", i+1, ctx.Err())
		}
	}
	futures := make([]jetstream.PubAckFuture, 0, count)
	for i := range count {
		if i >= natsPublishWindow {
			if err := await(i-natsPublishWindow, futures[i-natsPublishWindow]); err != nil {
				return err
			}
		}
		f, err := js.PublishAsync(natsSubject(n), body(i))
		if err != nil {
			return fmt.Errorf("message %d: %w", i+1, err)
		}
		futures = append(futures, f)
	}
	for i := max(0, count-natsPublishWindow); i < count; i++ {
		if err := await(i, futures[i]); err != nil {
			return err
		}
	}
	return nil
}

// consume runs the bare client or msgaudit's consumer; both end with a
// flush after their last ack (a PING the server answers after reading
// every ack before it). The clock stops at the last ack written
// (counter.acked): natsconsumer's graceful stop waits up to 2 s for its
// last pull request to run out, which says nothing about its throughput.
func (b *natsBroker) consume(ctx context.Context, p *plan, v variant, n names, be *backend, cnt *counter) (int, error) {
	if v.kind.isBare() {
		var apply func(ctx context.Context, key string, body []byte) error
		if be != nil {
			apply = be.apply
		}
		err := b.bare(ctx, p, n, cnt, apply)
		return cnt.handled(), err
	}
	pipeline := p.pipeline(be, nil, cnt) // nil: the consumer's default audit
	pipeline.Observer = ackClock{inner: pipeline.Observer, cnt: cnt}
	cfg := natsconsumer.Config{
		URL:         b.url,
		Stream:      natsStream(n),
		Consumer:    "msgaudit",
		Handler:     be.handler(cnt.inc),
		Concurrency: p.Concurrency,
		// natsconsumer has no prefetch and defaults InFlight to
		// Concurrency; the depth the other consumers use by default
		// (Prefetch) keeps the comparison and the report's InFlight true.
		InFlight:          p.inFlight(),
		Pipeline:          pipeline,
		DeadLetterSubject: natsDLQSubject(n),
		ConnectRetries:    5,         // a server busy with the previous run can refuse a first attempt
		Outbox:            be.outbox, // nil but in the outbox's send measurement
	}
	c, err := natsconsumer.New(cfg)
	if err != nil {
		return 0, err
	}
	err = runCounted(ctx, p, cnt, c.Run, c.Stats, be.drained)
	return cnt.handled(), err // counted after the run
}

// bare is the client a user writes without msgaudit: a durable pull
// consumer with explicit acks, Prefetch messages pulled ahead
// (PullMaxMessages), one goroutine, Ack after the handler. With an effect
// (apply not nil, keyed "<stream>:<sequence>") Concurrency workers each
// commit the effect and then Ack.
func (b *natsBroker) bare(ctx context.Context, p *plan, n names, cnt *counter, apply func(ctx context.Context, key string, body []byte) error) error {
	nc, js, err := b.dial(ctx)
	if err != nil {
		return err
	}
	defer nc.Close()
	rctx, cancel := context.WithTimeout(ctx, natsTimeout)
	cons, err := js.CreateOrUpdateConsumer(rctx, natsStream(n), jetstream.ConsumerConfig{
		Durable:   "bare",
		AckPolicy: jetstream.AckExplicitPolicy,
	})
	cancel()
	if err != nil {
		return fmt.Errorf("creating the consumer: %w", err)
	}
	it, err := cons.Messages(jetstream.PullMaxMessages(p.Prefetch))
	if err != nil {
		return err
	}
	defer it.Stop()
	errc := make(chan error, 1)
	fail := func(err error) {
		select {
		case errc <- err:
		default:
		}
	}
	if apply != nil {
		work := make(chan jetstream.Msg)
		for range p.Concurrency {
			go func() {
				for m := range work {
					meta, err := m.Metadata()
					if err != nil {
						fail(err)
						return
					}
					key := meta.Stream + ":" + strconv.FormatUint(meta.Sequence.Stream, 10)
					if err := apply(ctx, key, m.Data()); err != nil {
						fail(err)
						return
					}
					if err := m.Ack(); err != nil {
						fail(err)
						return
					}
					cnt.acked()
					// Counted once acknowledged: the run ends at the
					// count and flushes.
					cnt.settled(m.Data())
					cnt.inc()
				}
			}()
		}
		go func() {
			defer close(work)
			for {
				m, err := it.Next()
				if err != nil {
					if cnt.handled() < p.Messages && !errors.Is(err, jetstream.ErrMsgIteratorClosed) {
						fail(err)
					}
					return
				}
				select {
				case work <- m:
				case <-ctx.Done():
					return
				}
			}
		}()
	} else {
		go func() {
			for {
				m, err := it.Next()
				if err != nil {
					fail(err)
					return
				}
				if err := m.Ack(); err != nil {
					fail(err)
					return
				}
				cnt.acked()
				cnt.settled(m.Data())
				cnt.inc()
				if cnt.handled() == p.Messages {
					return
				}
			}
		}()
	}
	if err := cnt.wait(ctx, errc, p.Timeout); err != nil {
		return err
	}
	it.Stop()
	return nc.FlushTimeout(natsTimeout) // the server has read every ack
}

// verifyEmpty checks that the stream and its dead-letter stream hold no
// message. In a work-queue stream a message stays until a consumer
// acknowledges it, so the count includes messages delivered and not
// acknowledged. The server drops acknowledged messages shortly after
// reading their acks, so a stream that still holds some is asked again
// until b.emptyWait has passed; the error gives the count at the end.
func (b *natsBroker) verifyEmpty(ctx context.Context, n names) error {
	nc, js, err := b.dial(ctx)
	if err != nil {
		return err
	}
	defer nc.Close()
	deadline := time.Now().Add(b.emptyWait)
	for _, name := range []string{natsStream(n), natsDLQStream(n)} {
		for {
			rctx, cancel := context.WithTimeout(ctx, natsTimeout)
			st, err := js.Stream(rctx, name)
			var info *jetstream.StreamInfo
			if err == nil {
				info, err = st.Info(rctx)
			}
			cancel()
			if err != nil {
				return fmt.Errorf("stream %s: %w", name, err)
			}
			left := info.State.Msgs
			if left == 0 {
				break
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("stream %s still holds %d messages", name, left)
			}
			select {
			case <-time.After(20 * time.Millisecond):
			case <-ctx.Done():
				return fmt.Errorf("stream %s holds %d messages: %w", name, left, ctx.Err())
			}
		}
	}
	return nil
}

// cleanup deletes the stream and its dead-letter stream (and with them
// their consumers).
func (b *natsBroker) cleanup(ctx context.Context, n names) error {
	nc, js, err := b.dial(ctx)
	if err != nil {
		return err
	}
	defer nc.Close()
	var errs []error
	for _, name := range []string{natsStream(n), natsDLQStream(n)} {
		rctx, cancel := context.WithTimeout(ctx, natsTimeout)
		err := js.DeleteStream(rctx, name)
		cancel()
		if err != nil && !errors.Is(err, jetstream.ErrStreamNotFound) {
			errs = append(errs, fmt.Errorf("deleting stream %s: %w", name, err))
		}
	}
	return errors.Join(errs...)
}

// ackClock is the Observer of msgaudit's NATS consumer: it records when a
// delivery ends with an acknowledgement (right before the consumer writes
// its ack) and passes every event on to inner (latency mode's), if any.
type ackClock struct {
	inner receiver.Observer
	cnt   *counter
}

// Start implements receiver.Observer.
func (a ackClock) Start(ctx context.Context, m *receiver.Message) (context.Context, receiver.Observation) {
	var o receiver.Observation
	if a.inner != nil {
		ctx, o = a.inner.Start(ctx, m)
	}
	return ctx, ackObservation{o, a.cnt}
}

// ackObservation watches one delivery for its End; inner may be nil.
type ackObservation struct {
	inner receiver.Observation
	cnt   *counter
}

func (o ackObservation) Selected(name string, d receiver.Decision, err error) {
	if o.inner != nil {
		o.inner.Selected(name, d, err)
	}
}

func (o ackObservation) Handle(ctx context.Context) (context.Context, func(error)) {
	if o.inner != nil {
		return o.inner.Handle(ctx)
	}
	return ctx, func(error) {}
}

func (o ackObservation) Settle(ctx context.Context, s receiver.Settlement) (context.Context, func(error)) {
	if o.inner != nil {
		return o.inner.Settle(ctx, s)
	}
	return ctx, func(error) {}
}

func (o ackObservation) End(res receiver.Result) {
	if res.Action == receiver.Ack {
		o.cnt.acked()
	}
	if o.inner != nil {
		o.inner.End(res)
	}
}
