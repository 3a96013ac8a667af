package chaintest

import (
	"context"
	"fmt"
	"time"

	"github.com/go-stomp/stomp/v3"
	"github.com/go-stomp/stomp/v3/frame"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	amqp "github.com/rabbitmq/amqp091-go"
)

type stompBroker struct{ cfg *config }

func (b *stompBroker) setup(context.Context) error { return nil }

func (b *stompBroker) produce(ctx context.Context, keys []string) error {
	conn, err := stomp.Dial("tcp", b.cfg.Addr)
	if err != nil {
		return err
	}
	defer conn.Disconnect()
	for i, k := range keys {
		opts := []func(*frame.Frame) error{stomp.SendOpt.Header("persistent", "true")}
		if i == len(keys)-1 {
			opts = append(opts, stomp.SendOpt.Receipt)
		}
		if err := conn.Send(b.cfg.QueueA, "text/plain", []byte(k), opts...); err != nil {
			return err
		}
	}
	return nil
}

// left drains A, B and the dead-letter queue, counting what it finds.
func (b *stompBroker) left(ctx context.Context) (int, error) {
	conn, err := stomp.Dial("tcp", b.cfg.Addr)
	if err != nil {
		return 0, err
	}
	defer conn.Disconnect()
	n := 0
	for _, q := range []string{b.cfg.QueueA, b.cfg.QueueB, b.cfg.DLQ} {
		sub, err := conn.Subscribe(q, stomp.AckAuto)
		if err != nil {
			return n, err
		}
	drain:
		for {
			select {
			case m := <-sub.C:
				if m == nil || m.Err != nil {
					break drain
				}
				n++
			case <-time.After(time.Second):
				break drain
			}
		}
		_ = sub.Unsubscribe()
	}
	return n, nil
}

func (b *stompBroker) cleanup(context.Context) {}

type amqpBroker struct{ cfg *config }

func (b *amqpBroker) dial() (*amqp.Connection, *amqp.Channel, error) {
	conn, err := amqp.Dial(b.cfg.Addr)
	if err != nil {
		return nil, nil, err
	}
	ch, err := conn.Channel()
	if err != nil {
		conn.Close()
		return nil, nil, err
	}
	return conn, ch, nil
}

func (b *amqpBroker) setup(context.Context) error {
	conn, ch, err := b.dial()
	if err != nil {
		return err
	}
	defer conn.Close()
	for _, q := range []string{b.cfg.QueueA, b.cfg.QueueB, b.cfg.DLQ} {
		if _, err := ch.QueueDeclare(q, true, false, false, false, nil); err != nil {
			return err
		}
	}
	return nil
}

func (b *amqpBroker) produce(ctx context.Context, keys []string) error {
	conn, ch, err := b.dial()
	if err != nil {
		return err
	}
	defer conn.Close()
	if err := ch.Confirm(false); err != nil {
		return err
	}
	var confs []*amqp.DeferredConfirmation
	for _, k := range keys {
		c, err := ch.PublishWithDeferredConfirmWithContext(ctx, "", b.cfg.QueueA, false, false,
			amqp.Publishing{MessageId: k, DeliveryMode: amqp.Persistent, Body: []byte(k)})
		if err != nil {
			return err
		}
		confs = append(confs, c)
	}
	for _, c := range confs {
		if ok, err := c.WaitContext(ctx); err != nil || !ok {
			return fmt.Errorf("publish not confirmed: %v", err)
		}
	}
	return nil
}

func (b *amqpBroker) left(context.Context) (int, error) {
	conn, ch, err := b.dial()
	if err != nil {
		return 0, err
	}
	defer conn.Close()
	n := 0
	for _, q := range []string{b.cfg.QueueA, b.cfg.QueueB, b.cfg.DLQ} {
		st, err := ch.QueueDeclarePassive(q, true, false, false, false, nil)
		if err != nil {
			return n, err
		}
		n += st.Messages
	}
	return n, nil
}

func (b *amqpBroker) cleanup(context.Context) {
	conn, ch, err := b.dial()
	if err != nil {
		return
	}
	defer conn.Close()
	for _, q := range []string{b.cfg.QueueA, b.cfg.QueueB, b.cfg.DLQ} {
		_, _ = ch.QueueDelete(q, false, false, false)
	}
}

type natsBroker struct{ cfg *config }

func (b *natsBroker) js() (*nats.Conn, jetstream.JetStream, error) {
	nc, err := nats.Connect(b.cfg.Addr, nats.Timeout(10*time.Second))
	if err != nil {
		return nil, nil, err
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, nil, err
	}
	return nc, js, nil
}

func (b *natsBroker) setup(ctx context.Context) error {
	nc, js, err := b.js()
	if err != nil {
		return err
	}
	defer nc.Close()
	for _, sc := range []jetstream.StreamConfig{
		{Name: b.cfg.QueueA, Subjects: []string{b.cfg.QueueA}, Retention: jetstream.WorkQueuePolicy, Storage: jetstream.FileStorage},
		// B's stream keeps what B acknowledged: order reads it back.
		{Name: b.cfg.QueueB, Subjects: []string{b.cfg.QueueB}, Storage: jetstream.FileStorage},
		{Name: b.cfg.DLQ, Subjects: []string{b.cfg.DLQ + ".*"}, Storage: jetstream.FileStorage},
	} {
		if _, err := js.CreateStream(ctx, sc); err != nil {
			return fmt.Errorf("create stream %s: %w", sc.Name, err)
		}
	}
	return nil
}

func (b *natsBroker) produce(ctx context.Context, keys []string) error {
	nc, js, err := b.js()
	if err != nil {
		return err
	}
	defer nc.Close()
	for _, k := range keys {
		if _, err := js.Publish(ctx, b.cfg.QueueA, []byte(k)); err != nil {
			return err
		}
	}
	return nil
}

func (b *natsBroker) left(ctx context.Context) (int, error) {
	nc, js, err := b.js()
	if err != nil {
		return 0, err
	}
	defer nc.Close()
	n := 0
	for _, name := range []string{b.cfg.QueueA, b.cfg.DLQ} {
		s, err := js.Stream(ctx, name)
		if err != nil {
			return n, err
		}
		info, err := s.Info(ctx)
		if err != nil {
			return n, err
		}
		n += int(info.State.Msgs)
	}
	c, err := js.Consumer(ctx, b.cfg.QueueB, "chain")
	if err != nil {
		return n, err
	}
	info, err := c.Info(ctx)
	if err != nil {
		return n, err
	}
	return n + int(info.NumPending) + info.NumAckPending, nil
}

// published reads B's stream in order: the group and sequence number of
// every message the relay published, as the stream stored them.
func (b *natsBroker) published(ctx context.Context) ([][2]string, error) {
	nc, js, err := b.js()
	if err != nil {
		return nil, err
	}
	defer nc.Close()
	s, err := js.Stream(ctx, b.cfg.QueueB)
	if err != nil {
		return nil, err
	}
	info, err := s.Info(ctx)
	if err != nil {
		return nil, err
	}
	var out [][2]string
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq && seq > 0; seq++ {
		m, err := s.GetMsg(ctx, seq)
		if err != nil {
			return nil, err
		}
		out = append(out, [2]string{m.Header.Get("x-group"), m.Header.Get("x-seq")})
	}
	return out, nil
}

func (b *natsBroker) cleanup(ctx context.Context) {
	nc, js, err := b.js()
	if err != nil {
		return
	}
	defer nc.Close()
	for _, name := range []string{b.cfg.QueueA, b.cfg.QueueB, b.cfg.DLQ} {
		_ = js.DeleteStream(ctx, name)
	}
}
