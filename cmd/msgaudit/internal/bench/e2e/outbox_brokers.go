package e2e

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/acemq/msgaudit/internal/testkit/stompsub"
	"github.com/acemq/msgaudit/natsconsumer"
	"github.com/acemq/msgaudit/outbox"
	"github.com/acemq/msgaudit/rabbitconsumer"
	"github.com/acemq/msgaudit/stompconsumer"
	"github.com/go-stomp/stomp/v3"
	"github.com/nats-io/nats.go/jetstream"
	amqp "github.com/rabbitmq/amqp091-go"
)

var (
	_ outputs = (*stompBroker)(nil)
	_ outputs = (*amqpBroker)(nil)
	_ outputs = (*natsBroker)(nil)
)

// countIdle is how long countOut waits for one more message once it has
// the ones it expects (a resend would follow), and countWait how long
// before.
const (
	countIdle = time.Second
	countWait = 30 * time.Second
)

// --- STOMP: the output is the queue outQueue.

func (b *stompBroker) outDest(n names) string { return "/queue/" + outQueue(n) }

// declareOut does nothing: ActiveMQ creates a queue at its first SEND.
func (b *stompBroker) declareOut(context.Context, names) error { return nil }

// countOut consumes the output (ack:auto) until it has want messages and
// none follows within countIdle; a browse must then list no more. A STOMP
// browse alone cannot count: ActiveMQ caps it at 400 messages.
func (b *stompBroker) countOut(ctx context.Context, n names, want int) (int, error) {
	c, err := b.dial(ctx)
	if err != nil {
		return 0, err
	}
	defer c.Disconnect()
	sub, err := c.Subscribe(b.outDest(n), stomp.AckAuto, stomp.SubscribeOpt.Header("activemq.prefetchSize", "1000"))
	if err != nil {
		return 0, err
	}
	count := 0
	func() {
		defer func() { _ = stompsub.Unsubscribe(sub) }()
		for {
			wait := countWait
			if count >= want {
				wait = countIdle
			}
			t := time.NewTimer(wait)
			select {
			case m, ok := <-sub.C:
				t.Stop()
				if !ok || m.Err != nil {
					if err == nil && m != nil {
						err = m.Err
					}
					return
				}
				count++
				continue
			case <-t.C:
			case <-ctx.Done():
				t.Stop()
				err = ctx.Err()
			}
			return
		}
	}()
	if err != nil {
		return count, err
	}
	left, err := browse(ctx, c, b.outDest(n))
	return count + left, err
}

// cleanupOut consumes what is left on the output (STOMP cannot delete a
// queue) as countOut does: a browse of a queue holding many thousands of
// messages can take longer than drain allows.
func (b *stompBroker) cleanupOut(ctx context.Context, n names) error {
	_, err := b.countOut(ctx, n, 0)
	return err
}

func (b *stompBroker) newPublisher(ctx context.Context) (outbox.Publisher, func(), error) {
	pub, err := stompconsumer.NewPublisher(ctx, stompconsumer.Config{Addresses: []string{b.addr}})
	if err != nil {
		return nil, nil, err
	}
	return pub, func() { _ = pub.Close() }, nil
}

// barePublisher SENDs persistent messages with a receipt on a connection
// of its own; go-stomp waits for one receipt at a time per connection, so
// concurrent publishes take turns, as on the outbox's Publisher.
func (b *stompBroker) barePublisher(ctx context.Context, n names) (*barePub, error) {
	c, err := b.dial(ctx)
	if err != nil {
		return nil, err
	}
	dest := b.outDest(n)
	return &barePub{
		publish: func(_ context.Context, body []byte) error {
			return c.Send(dest, "application/octet-stream", body, stomp.SendOpt.Header("persistent", "true"), stomp.SendOpt.Receipt)
		},
		close: c.Disconnect,
	}, nil
}

func (b *stompBroker) receiveOut(ctx context.Context, n names, got func([]byte)) (func() error, error) {
	c, err := b.dial(ctx)
	if err != nil {
		return nil, err
	}
	sub, err := c.Subscribe(b.outDest(n), stomp.AckAuto, stomp.SubscribeOpt.Header("activemq.prefetchSize", "1000"))
	if err != nil {
		c.Disconnect()
		return nil, err
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for m := range sub.C {
			if m.Err != nil {
				return
			}
			got(m.Body)
		}
	}()
	return func() error {
		err := stompsub.Unsubscribe(sub)
		return errors.Join(err, c.Disconnect())
	}, nil
}

// --- AMQP: the output is the durable queue outQueue, on the default
// exchange.

func (b *amqpBroker) outDest(n names) string { return outQueue(n) }

func (b *amqpBroker) declareOut(ctx context.Context, n names) error {
	conn, ch, err := b.dial(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()
	_, err = ch.QueueDeclare(outQueue(n), true, false, false, false, nil)
	return err
}

// countOut counts with a passive declare: nothing consumes the output, and
// every message was confirmed.
func (b *amqpBroker) countOut(ctx context.Context, n names, _ int) (int, error) {
	conn, ch, err := b.dial(ctx)
	if err != nil {
		return 0, err
	}
	defer conn.Close()
	st, err := ch.QueueDeclarePassive(outQueue(n), true, false, false, false, nil)
	return st.Messages, err
}

func (b *amqpBroker) cleanupOut(ctx context.Context, n names) error {
	conn, ch, err := b.dial(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()
	_, err = ch.QueueDelete(outQueue(n), false, false, false)
	var ae *amqp.Error
	if errors.As(err, &ae) && ae.Code == amqp.NotFound {
		return nil
	}
	return err
}

func (b *amqpBroker) newPublisher(ctx context.Context) (outbox.Publisher, func(), error) {
	pub, err := rabbitconsumer.NewPublisher(ctx, rabbitconsumer.Config{URL: b.url})
	if err != nil {
		return nil, nil, err
	}
	return pub, func() { _ = pub.Close() }, nil
}

// barePublisher publishes persistent messages on one channel in confirm
// mode, each publish waiting for its own confirm (amqp091-go's deferred
// confirmations), concurrent publishes sharing the channel.
func (b *amqpBroker) barePublisher(ctx context.Context, n names) (*barePub, error) {
	conn, ch, err := b.dial(ctx)
	if err != nil {
		return nil, err
	}
	if err := ch.Confirm(false); err != nil {
		conn.Close()
		return nil, err
	}
	q := outQueue(n)
	return &barePub{
		publish: func(ctx context.Context, body []byte) error {
			dc, err := ch.PublishWithDeferredConfirmWithContext(ctx, "", q, false, false, amqp.Publishing{
				DeliveryMode: amqp.Persistent, ContentType: "application/octet-stream", Body: body})
			if err != nil {
				return err
			}
			ok, err := dc.WaitContext(ctx)
			if err == nil && !ok {
				err = errors.New("the broker nacked a publish")
			}
			return err
		},
		close: conn.Close,
	}, nil
}

func (b *amqpBroker) receiveOut(ctx context.Context, n names, got func([]byte)) (func() error, error) {
	conn, ch, err := b.dial(ctx)
	if err != nil {
		return nil, err
	}
	deliveries, err := ch.Consume(outQueue(n), "", true, false, false, false, nil)
	if err != nil {
		conn.Close()
		return nil, err
	}
	go func() {
		for d := range deliveries {
			got(d.Body)
		}
	}()
	return conn.Close, nil
}

// --- NATS: the output is the subject outQueue, captured by a stream of
// its own (file storage, limits retention).

func natsOutStream(n names) string { return n.ident + "_out" }

func (b *natsBroker) outDest(n names) string { return outQueue(n) }

func (b *natsBroker) declareOut(ctx context.Context, n names) error {
	nc, js, err := b.dial(ctx)
	if err != nil {
		return err
	}
	defer nc.Close()
	rctx, cancel := context.WithTimeout(ctx, natsTimeout)
	defer cancel()
	_, err = js.CreateOrUpdateStream(rctx, jetstream.StreamConfig{Name: natsOutStream(n), Subjects: []string{outQueue(n)},
		Storage: jetstream.FileStorage, Retention: jetstream.LimitsPolicy})
	return err
}

func (b *natsBroker) countOut(ctx context.Context, n names, _ int) (int, error) {
	nc, js, err := b.dial(ctx)
	if err != nil {
		return 0, err
	}
	defer nc.Close()
	rctx, cancel := context.WithTimeout(ctx, natsTimeout)
	defer cancel()
	st, err := js.Stream(rctx, natsOutStream(n))
	if err != nil {
		return 0, err
	}
	info, err := st.Info(rctx)
	if err != nil {
		return 0, err
	}
	return int(info.State.Msgs), nil
}

func (b *natsBroker) cleanupOut(ctx context.Context, n names) error {
	nc, js, err := b.dial(ctx)
	if err != nil {
		return err
	}
	defer nc.Close()
	rctx, cancel := context.WithTimeout(ctx, natsTimeout)
	defer cancel()
	if err := js.DeleteStream(rctx, natsOutStream(n)); err != nil && !errors.Is(err, jetstream.ErrStreamNotFound) {
		return err
	}
	return nil
}

func (b *natsBroker) newPublisher(ctx context.Context) (outbox.Publisher, func(), error) {
	pub, err := natsconsumer.NewPublisher(ctx, natsconsumer.Config{URL: b.url})
	if err != nil {
		return nil, nil, err
	}
	return pub, func() { _ = pub.Close() }, nil
}

// barePublisher publishes with JetStream on one connection, each publish
// awaiting its PubAck.
func (b *natsBroker) barePublisher(ctx context.Context, n names) (*barePub, error) {
	nc, js, err := b.dial(ctx)
	if err != nil {
		return nil, err
	}
	subject := outQueue(n)
	return &barePub{
		publish: func(ctx context.Context, body []byte) error {
			_, err := js.Publish(ctx, subject, body)
			return err
		},
		close: func() error { nc.Close(); return nil },
	}, nil
}

func (b *natsBroker) receiveOut(ctx context.Context, n names, got func([]byte)) (func() error, error) {
	nc, js, err := b.dial(ctx)
	if err != nil {
		return nil, err
	}
	rctx, cancel := context.WithTimeout(ctx, natsTimeout)
	defer cancel()
	cons, err := js.CreateOrUpdateConsumer(rctx, natsOutStream(n), jetstream.ConsumerConfig{AckPolicy: jetstream.AckNonePolicy})
	if err != nil {
		nc.Close()
		return nil, fmt.Errorf("creating the output's consumer: %w", err)
	}
	cc, err := cons.Consume(func(m jetstream.Msg) { got(m.Data()) })
	if err != nil {
		nc.Close()
		return nil, err
	}
	return func() error { cc.Stop(); nc.Close(); return nil }, nil
}
