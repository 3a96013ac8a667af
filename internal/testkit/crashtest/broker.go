package crashtest

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/go-stomp/stomp/v3"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/acemq/msgaudit/internal/testkit/stompsub"
)

// broker is the parent's own connection to the test broker: it fills the
// queue and, at the end, empties what is left.
type broker interface {
	// produce sends one persistent message per key to queue, carrying the
	// key in KeyHeader (and as its body), and returns once the broker has
	// them all.
	produce(ctx context.Context, queue string, keys []string) error
	// take removes every message left on dest and returns how many there
	// were. It is called when no consumer runs.
	take(ctx context.Context, dest string) (int, error)
	// close ends the connection.
	close()
}

// stompBroker speaks STOMP to ActiveMQ.
type stompBroker struct {
	conn *stomp.Conn
}

func dialSTOMP(addr string) (*stompBroker, error) {
	c, err := stomp.Dial("tcp", addr, stomp.ConnOpt.AcceptVersion(stomp.V12), stomp.ConnOpt.HeartBeat(0, 0))
	if err != nil {
		return nil, fmt.Errorf("crashtest: stomp %s: %w", addr, err)
	}
	return &stompBroker{conn: c}, nil
}

// produce sends in transactions of 500, each committed with a receipt.
func (b *stompBroker) produce(ctx context.Context, queue string, keys []string) error {
	for start := 0; start < len(keys); start += 500 {
		tx, err := b.conn.BeginWithError()
		if err != nil {
			return err
		}
		for _, k := range keys[start:min(start+500, len(keys))] {
			if err := tx.Send(queue, "text/plain", []byte(k),
				stomp.SendOpt.Header("persistent", "true"), stomp.SendOpt.Header(KeyHeader, k)); err != nil {
				return fmt.Errorf("crashtest: send to %s: %w", queue, err)
			}
		}
		if err := tx.CommitWithReceipt(); err != nil {
			return fmt.Errorf("crashtest: commit to %s: %w", queue, err)
		}
		if err := ctx.Err(); err != nil {
			return err
		}
	}
	return nil
}

// take drains dest: it subscribes and acknowledges what arrives until
// nothing has come for half a second (STOMP cannot ask a queue's depth).
func (b *stompBroker) take(ctx context.Context, dest string) (int, error) {
	sub, err := b.conn.Subscribe(dest, stomp.AckClientIndividual, stomp.SubscribeOpt.Header("activemq.prefetchSize", "200"))
	if err != nil {
		return 0, fmt.Errorf("crashtest: subscribe %s: %w", dest, err)
	}
	defer func() { _ = stompsub.Unsubscribe(sub) }()
	n := 0
	quiet := time.NewTimer(500 * time.Millisecond)
	defer quiet.Stop()
	for {
		select {
		case m, ok := <-sub.C:
			if !ok {
				return n, fmt.Errorf("crashtest: drain %s: subscription closed", dest)
			}
			if m.Err != nil {
				return n, fmt.Errorf("crashtest: drain %s: %w", dest, m.Err)
			}
			n++
			if err := b.conn.Ack(m); err != nil {
				return n, fmt.Errorf("crashtest: drain %s: %w", dest, err)
			}
			quiet.Reset(500 * time.Millisecond)
		case <-quiet.C:
			return n, nil
		case <-ctx.Done():
			return n, fmt.Errorf("crashtest: drain %s: %w", dest, ctx.Err())
		}
	}
}

func (b *stompBroker) close() { _ = b.conn.Disconnect() }

// brokerDLQ is where ActiveMQ's own dead-lettering puts what it removes
// from a queue (the test broker's individual dead-letter strategy).
func brokerDLQ(queue string) string {
	const p = "/queue/"
	if len(queue) > len(p) && queue[:len(p)] == p {
		return p + "DLQ." + queue[len(p):]
	}
	return p + "DLQ." + queue
}

// amqpBroker speaks AMQP 0-9-1 to RabbitMQ.
type amqpBroker struct {
	conn *amqp.Connection
	ch   *amqp.Channel
}

func dialAMQP(url string) (*amqpBroker, error) {
	c, err := amqp.Dial(url)
	if err != nil {
		return nil, fmt.Errorf("crashtest: amqp: %w", err)
	}
	ch, err := c.Channel()
	if err == nil {
		err = ch.Confirm(false)
	}
	if err != nil {
		c.Close()
		return nil, fmt.Errorf("crashtest: amqp channel: %w", err)
	}
	return &amqpBroker{conn: c, ch: ch}, nil
}

// declare creates durable queues.
func (b *amqpBroker) declare(queues ...string) error {
	for _, q := range queues {
		if _, err := b.ch.QueueDeclare(q, true, false, false, false, nil); err != nil {
			return fmt.Errorf("crashtest: declare %s: %w", q, err)
		}
	}
	return nil
}

// remove deletes queues.
func (b *amqpBroker) remove(queues ...string) error {
	var errs []error
	for _, q := range queues {
		if _, err := b.ch.QueueDelete(q, false, false, false); err != nil {
			errs = append(errs, fmt.Errorf("crashtest: delete %s: %w", q, err))
		}
	}
	return errors.Join(errs...)
}

// produce publishes with publisher confirms, waiting for all of them.
func (b *amqpBroker) produce(ctx context.Context, queue string, keys []string) error {
	dcs := make([]*amqp.DeferredConfirmation, 0, len(keys))
	for _, k := range keys {
		dc, err := b.ch.PublishWithDeferredConfirmWithContext(ctx, "", queue, false, false, amqp.Publishing{
			DeliveryMode: amqp.Persistent, MessageId: k, Headers: amqp.Table{KeyHeader: k},
			ContentType: "text/plain", Body: []byte(k)})
		if err != nil {
			return fmt.Errorf("crashtest: publish to %s: %w", queue, err)
		}
		dcs = append(dcs, dc)
	}
	for _, dc := range dcs {
		ok, err := dc.WaitContext(ctx)
		if err != nil {
			return fmt.Errorf("crashtest: publish to %s: %w", queue, err)
		}
		if !ok {
			return fmt.Errorf("crashtest: publish to %s: nacked by the broker", queue)
		}
	}
	return nil
}

// take purges dest and returns how many messages it held.
func (b *amqpBroker) take(ctx context.Context, dest string) (int, error) {
	n, err := b.ch.QueuePurge(dest, false)
	if err != nil {
		return 0, fmt.Errorf("crashtest: purge %s: %w", dest, err)
	}
	return n, nil
}

func (b *amqpBroker) close() { _ = b.conn.Close() }

// natsBroker speaks to NATS JetStream. Each queue is a stream of its own
// name capturing the subject of that name; the consumed one retains
// messages until they are acknowledged (a work queue), so what it holds
// at the end is what no consumer acknowledged.
type natsBroker struct {
	nc *nats.Conn
	js jetstream.JetStream
}

func dialNATS(url string) (*natsBroker, error) {
	nc, err := nats.Connect(url, nats.Timeout(10*time.Second))
	if err != nil {
		return nil, fmt.Errorf("crashtest: nats: %w", err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, fmt.Errorf("crashtest: jetstream: %w", err)
	}
	return &natsBroker{nc: nc, js: js}, nil
}

// declare creates the consumed stream (work-queue retention) and the
// dead-letter stream (kept until purged).
func (b *natsBroker) declare(ctx context.Context, queue, deadLetter string) error {
	for _, sc := range []jetstream.StreamConfig{
		{Name: queue, Subjects: []string{queue}, Retention: jetstream.WorkQueuePolicy, Storage: jetstream.FileStorage},
		{Name: deadLetter, Subjects: []string{deadLetter}, Storage: jetstream.FileStorage},
	} {
		if _, err := b.js.CreateStream(ctx, sc); err != nil {
			return fmt.Errorf("crashtest: create stream %s: %w", sc.Name, err)
		}
	}
	return nil
}

// remove deletes streams.
func (b *natsBroker) remove(ctx context.Context, streams ...string) error {
	var errs []error
	for _, s := range streams {
		if err := b.js.DeleteStream(ctx, s); err != nil && !errors.Is(err, jetstream.ErrStreamNotFound) {
			errs = append(errs, fmt.Errorf("crashtest: delete stream %s: %w", s, err))
		}
	}
	return errors.Join(errs...)
}

// produce publishes with JetStream, waiting for every PubAck.
func (b *natsBroker) produce(ctx context.Context, queue string, keys []string) error {
	futures := make([]jetstream.PubAckFuture, 0, len(keys))
	for _, k := range keys {
		m := nats.NewMsg(queue)
		m.Header.Set(KeyHeader, k)
		m.Data = []byte(k)
		f, err := b.js.PublishMsgAsync(m)
		if err != nil {
			return fmt.Errorf("crashtest: publish to %s: %w", queue, err)
		}
		futures = append(futures, f)
	}
	for _, f := range futures {
		select {
		case <-f.Ok():
		case err := <-f.Err():
			return fmt.Errorf("crashtest: publish to %s: %w", queue, err)
		case <-ctx.Done():
			return fmt.Errorf("crashtest: publish to %s: %w", queue, ctx.Err())
		}
	}
	return nil
}

// take purges the stream dest and returns how many messages it held.
func (b *natsBroker) take(ctx context.Context, dest string) (int, error) {
	s, err := b.js.Stream(ctx, dest)
	if err != nil {
		return 0, fmt.Errorf("crashtest: stream %s: %w", dest, err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		return 0, fmt.Errorf("crashtest: stream %s: %w", dest, err)
	}
	if err := s.Purge(ctx); err != nil {
		return 0, fmt.Errorf("crashtest: purge %s: %w", dest, err)
	}
	return int(info.State.Msgs), nil
}

func (b *natsBroker) close() { b.nc.Close() }
