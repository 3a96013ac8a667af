package e2e

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/acemq/msgaudit/connaudit"
	"github.com/acemq/msgaudit/internal/redact"
	"github.com/acemq/msgaudit/rabbitconsumer"
	"github.com/acemq/msgaudit/receiver"
	amqp "github.com/rabbitmq/amqp091-go"
)

// amqpBroker is RabbitMQ.
type amqpBroker struct{ url string }

func (b *amqpBroker) dial(ctx context.Context) (*amqp.Connection, *amqp.Channel, error) {
	if err := ctx.Err(); err != nil {
		return nil, nil, err
	}
	conn, err := amqp.Dial(b.url)
	if err != nil {
		return nil, nil, fmt.Errorf("connecting to %s: %w", redact.URL(b.url), err)
	}
	ch, err := conn.Channel()
	if err != nil {
		conn.Close()
		return nil, nil, err
	}
	return conn, ch, nil
}

func dlqName(n names) string { return n.queue + ".dlq" }

// preload declares the durable queue and publishes count persistent
// messages, body(i) the i-th (from 0), with ids "<seqKey>:<i+1>" (so the
// connection audit can check them), waiting for every publisher confirm.
func (b *amqpBroker) preload(ctx context.Context, n names, count int, body func(i int) []byte) error {
	conn, ch, err := b.dial(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()
	if _, err := ch.QueueDeclare(n.queue, true, false, false, false, nil); err != nil {
		return fmt.Errorf("declaring %s: %w", n.queue, err)
	}
	if err := ch.Confirm(false); err != nil {
		return err
	}
	confirms := ch.NotifyPublish(make(chan amqp.Confirmation, count))
	for i := range count {
		err := ch.PublishWithContext(ctx, "", n.queue, false, false, amqp.Publishing{
			DeliveryMode: amqp.Persistent,
			ContentType:  "application/octet-stream",
			MessageId:    n.seqKey + ":" + strconv.Itoa(i+1),
			Body:         body(i),
		})
		if err != nil {
			return fmt.Errorf("message %d: %w", i+1, err)
		}
	}
	for i := range count {
		select {
		case c, ok := <-confirms:
			if !ok {
				return fmt.Errorf("channel closed after %d of %d publisher confirms", i, count)
			}
			if !c.Ack {
				return fmt.Errorf("broker refused message with delivery tag %d", c.DeliveryTag)
			}
		case <-ctx.Done():
			return fmt.Errorf("%d of %d publisher confirms: %w", i, count, ctx.Err())
		}
	}
	return nil
}

// consume runs the bare client or msgaudit's consumer; both end by closing
// the channel and connection, handshakes the broker answers after
// processing every ack sent before them.
func (b *amqpBroker) consume(ctx context.Context, p *plan, v variant, n names, be *backend, cnt *counter) (int, error) {
	if v.kind.isBare() {
		var apply func(ctx context.Context, key string, body []byte) error
		if be != nil {
			apply = be.apply
		}
		err := b.bare(ctx, p, n, cnt, apply)
		return cnt.handled(), err
	}
	a, err := connaudit.New(connaudit.Options{})
	if err != nil {
		return 0, err
	}
	cfg := rabbitconsumer.Config{
		URL:            b.url,
		Queue:          n.queue,
		Handler:        be.handler(cnt.inc),
		Prefetch:       p.Prefetch,
		Concurrency:    p.Concurrency,
		InFlight:       p.InFlight,
		Pipeline:       p.pipeline(be, receiver.ConnAudit(a), cnt),
		ConnectRetries: 5,         // a broker busy with the previous run can refuse a first attempt
		Outbox:         be.outbox, // nil but in the outbox's send measurement
	}
	c, err := rabbitconsumer.New(cfg)
	if err != nil {
		return 0, err
	}
	err = runCounted(ctx, p, cnt, c.Run, c.Stats, be.drained)
	return cnt.handled(), err // counted after the run
}

// bare is the client a user writes without msgaudit: one goroutine, manual
// acks, basic.qos prefetch, basic.ack after the handler. With an effect
// (apply not nil) Concurrency workers each commit the effect and then ack.
func (b *amqpBroker) bare(ctx context.Context, p *plan, n names, cnt *counter, apply func(ctx context.Context, key string, body []byte) error) error {
	conn, ch, err := b.dial(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()
	if err := ch.Qos(p.Prefetch, 0, false); err != nil {
		return err
	}
	deliveries, err := ch.Consume(n.queue, "", false, false, false, false, nil)
	if err != nil {
		return err
	}
	errc := make(chan error, 1)
	fail := func(err error) {
		select {
		case errc <- err:
		default:
		}
	}
	if apply != nil {
		work := make(chan amqp.Delivery)
		for range p.Concurrency {
			go func() {
				for d := range work {
					if err := apply(ctx, d.MessageId, d.Body); err != nil {
						fail(err)
						return
					}
					if err := d.Ack(false); err != nil {
						fail(err)
						return
					}
					// Counted once acknowledged: the run ends at the
					// count and closes the channel.
					cnt.settled(d.Body)
					cnt.inc()
				}
			}()
		}
		go func() {
			defer close(work)
			for d := range deliveries {
				select {
				case work <- d:
				case <-ctx.Done():
					return
				}
			}
			if cnt.handled() < p.Messages {
				fail(errors.New("delivery channel closed"))
			}
		}()
	} else {
		go func() {
			for d := range deliveries {
				if err := d.Ack(false); err != nil {
					errc <- err
					return
				}
				cnt.settled(d.Body)
				cnt.inc()
				if cnt.handled() == p.Messages {
					return
				}
			}
			errc <- errors.New("delivery channel closed")
		}()
	}
	if err := cnt.wait(ctx, errc, p.Timeout); err != nil {
		return err
	}
	if err := ch.Close(); err != nil { // waits for channel.close-ok
		return err
	}
	return conn.Close()
}

// verifyEmpty counts, with a passive declare after every consumer is gone,
// the messages left on the queue and its dead-letter queue: a closed
// channel's unacknowledged deliveries are back on the queue by then, so the
// count leaves nothing out.
func (b *amqpBroker) verifyEmpty(ctx context.Context, n names) error {
	for _, q := range []string{n.queue, dlqName(n)} {
		conn, ch, err := b.dial(ctx)
		if err != nil {
			return err
		}
		st, err := ch.QueueDeclarePassive(q, true, false, false, false, nil)
		conn.Close()
		var ae *amqp.Error
		if errors.As(err, &ae) && ae.Code == amqp.NotFound && q != n.queue {
			continue // the bare client declares no dead-letter queue
		}
		if err != nil {
			return fmt.Errorf("passive declare of %s: %w", q, err)
		}
		if st.Messages > 0 || st.Consumers > 0 {
			return fmt.Errorf("%s still holds %d messages (%d consumers)", q, st.Messages, st.Consumers)
		}
	}
	return nil
}

// cleanup deletes the queue and its dead-letter queue.
func (b *amqpBroker) cleanup(ctx context.Context, n names) error {
	for _, q := range []string{n.queue, dlqName(n)} {
		conn, ch, err := b.dial(ctx)
		if err != nil {
			return err
		}
		_, err = ch.QueueDelete(q, false, false, false)
		conn.Close()
		var ae *amqp.Error
		if err != nil && !(errors.As(err, &ae) && ae.Code == amqp.NotFound) {
			return fmt.Errorf("deleting %s: %w", q, err)
		}
	}
	return nil
}
