package e2e

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/acemq/msgaudit/internal/testkit/stompsub"
	"github.com/acemq/msgaudit/stompconsumer"
	"github.com/go-stomp/stomp/v3"
	"github.com/go-stomp/stomp/v3/frame"
)

// stompBroker is ActiveMQ over STOMP.
type stompBroker struct{ addr string }

// quiet discards go-stomp's log lines (it logs every subscription a
// DISCONNECT ends).
type quiet struct{}

func (quiet) Debugf(string, ...any)   {}
func (quiet) Infof(string, ...any)    {}
func (quiet) Warningf(string, ...any) {}
func (quiet) Errorf(string, ...any)   {}
func (quiet) Debug(string)            {}
func (quiet) Info(string)             {}
func (quiet) Warning(string)          {}
func (quiet) Error(string)            {}

func (b *stompBroker) dial(ctx context.Context) (*stomp.Conn, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	c, err := stomp.Dial("tcp", b.addr, stomp.ConnOpt.Logger(quiet{}), stomp.ConnOpt.HeartBeat(0, 0))
	if err != nil {
		return nil, fmt.Errorf("connecting to %s: %w", b.addr, err)
	}
	return c, nil
}

func queueDest(n names) string { return "/queue/" + n.queue }
func dlqDest(n names) string   { return "/queue/" + n.queue + ".dlq" }

// preload sends count persistent messages, body(i) the i-th (from 0); the
// last one asks for a receipt, which ActiveMQ sends after it has processed
// every frame before it.
func (b *stompBroker) preload(ctx context.Context, n names, count int, body func(i int) []byte) error {
	c, err := b.dial(ctx)
	if err != nil {
		return err
	}
	defer c.Disconnect()
	for i := range count {
		opts := []func(*frame.Frame) error{stomp.SendOpt.Header("persistent", "true")}
		if i == count-1 {
			opts = append(opts, stomp.SendOpt.Receipt)
		}
		if err := c.Send(queueDest(n), "application/octet-stream", body(i), opts...); err != nil {
			return fmt.Errorf("message %d: %w", i+1, err)
		}
		if i%1000 == 0 && ctx.Err() != nil {
			return ctx.Err()
		}
	}
	return nil
}

// consume runs the bare client or msgaudit's consumer; both end with a
// DISCONNECT whose receipt confirms every ACK sent before it.
func (b *stompBroker) consume(ctx context.Context, p *plan, v variant, n names, be *backend, cnt *counter) (int, error) {
	if v.kind.isBare() {
		var apply func(ctx context.Context, key string, body []byte) error
		if be != nil {
			apply = be.apply
		}
		err := b.bare(ctx, p, n, cnt, apply)
		return cnt.handled(), err
	}
	cfg := stompconsumer.Config{
		Addresses:             []string{b.addr},
		Prefetch:              p.Prefetch,
		Concurrency:           p.Concurrency,
		InFlight:              p.InFlight,
		Pipeline:              p.pipeline(be, nil, cnt), // nil: the consumer's default audit
		DeadLetterDestination: dlqDest(n),
		ConnectRetries:        5,         // a broker busy with the previous run can refuse a first STOMP CONNECT
		Outbox:                be.outbox, // nil but in the outbox's send measurement
		Subscriptions: []stompconsumer.Subscription{{
			Destination: queueDest(n),
			Handler:     be.handler(cnt.inc),
		}},
	}
	c, err := stompconsumer.New(cfg)
	if err != nil {
		return 0, err
	}
	err = runCounted(ctx, p, cnt, c.Run, c.Stats, be.drained)
	return cnt.handled(), err // counted after the run
}

// bare is the client a user writes without msgaudit: one goroutine,
// ack:client-individual, ACK after the handler. With an effect (apply not
// nil) Concurrency workers each commit the effect and then ACK.
func (b *stompBroker) bare(ctx context.Context, p *plan, n names, cnt *counter, apply func(ctx context.Context, key string, body []byte) error) error {
	c, err := b.dial(ctx)
	if err != nil {
		return err
	}
	defer c.MustDisconnect()
	sub, err := c.Subscribe(queueDest(n), stomp.AckClientIndividual,
		stomp.SubscribeOpt.Header("activemq.prefetchSize", strconv.Itoa(p.Prefetch)))
	if err != nil {
		return err
	}
	errc := make(chan error, 1)
	if apply != nil {
		work := make(chan *stomp.Message)
		for range p.Concurrency {
			go func() {
				for m := range work {
					if err := apply(ctx, m.Header.Get("message-id"), m.Body); err != nil {
						select {
						case errc <- err:
						default:
						}
						return
					}
					if err := c.Ack(m); err != nil {
						select {
						case errc <- err:
						default:
						}
						return
					}
					// Counted once acknowledged: the run ends at the
					// count, and an ACK not yet sent would be lost.
					cnt.settled(m.Body)
					cnt.inc()
				}
			}()
		}
		go func() {
			defer close(work)
			for m := range sub.C {
				if m.Err != nil {
					errc <- m.Err
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
			for m := range sub.C {
				if m.Err != nil {
					errc <- m.Err
					return
				}
				if err := c.Ack(m); err != nil {
					errc <- err
					return
				}
				cnt.settled(m.Body)
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
	return c.Disconnect() // waits for the receipt
}

// verifyEmpty browses the queue and its dead-letter queue: a browse lists
// every message not acknowledged, delivered ones included, and ends with a
// browser:end message.
func (b *stompBroker) verifyEmpty(ctx context.Context, n names) error {
	c, err := b.dial(ctx)
	if err != nil {
		return err
	}
	defer c.Disconnect()
	for _, d := range []string{queueDest(n), dlqDest(n)} {
		left, err := browse(ctx, c, d)
		if err != nil {
			return fmt.Errorf("browsing %s: %w", d, err)
		}
		if left > 0 {
			return fmt.Errorf("%s still holds %d or more messages", d, left)
		}
	}
	return nil
}

// browse counts the messages a queue browse returns (ActiveMQ caps a browse
// at its maxBrowsePageSize, 400 by default, so this is a lower bound).
func browse(ctx context.Context, c *stomp.Conn, dest string) (int, error) {
	sub, err := c.Subscribe(dest, stomp.AckAuto, stomp.SubscribeOpt.Header("browser", "true"))
	if err != nil {
		return 0, err
	}
	defer func() { _ = stompsub.Unsubscribe(sub) }()
	ctx, cancel := context.WithTimeout(ctx, stompBrowseTimeout)
	defer cancel()
	count := 0
	for {
		select {
		case m, ok := <-sub.C:
			if !ok {
				return count, errors.New("subscription closed before the browse ended")
			}
			if m.Err != nil {
				return count, m.Err
			}
			if m.Header.Get("browser") == "end" {
				return count, nil
			}
			count++
		case <-ctx.Done():
			return count, fmt.Errorf("no browser:end within %v: %w", stompBrowseTimeout, ctx.Err())
		}
	}
}

// cleanup consumes whatever a failed or interrupted measurement left on the
// queue and its dead-letter queue (STOMP cannot delete a destination, so
// the empty queues stay).
func (b *stompBroker) cleanup(ctx context.Context, n names) error {
	c, err := b.dial(ctx)
	if err != nil {
		return err
	}
	defer c.Disconnect()
	for _, d := range []string{queueDest(n), dlqDest(n)} {
		if err := drain(ctx, c, d); err != nil {
			return fmt.Errorf("draining %s: %w", d, err)
		}
	}
	return nil
}

// drain consumes (ack:auto) as many messages as a browse lists, until a
// browse lists none.
func drain(ctx context.Context, c *stomp.Conn, dest string) error {
	left, err := browse(ctx, c, dest)
	if err != nil || left == 0 {
		return err
	}
	sub, err := c.Subscribe(dest, stomp.AckAuto)
	if err != nil {
		return err
	}
	defer func() { _ = stompsub.Unsubscribe(sub) }()
	for left > 0 {
		for range left {
			select {
			case m, ok := <-sub.C:
				if !ok {
					return errors.New("subscription closed while draining")
				}
				if m.Err != nil {
					return m.Err
				}
			case <-ctx.Done():
				return fmt.Errorf("%d messages not received: %w", left, ctx.Err())
			}
		}
		if left, err = browse(ctx, c, dest); err != nil {
			return err
		}
	}
	return nil
}

// stompBrowseTimeout bounds one verifying browse.
const stompBrowseTimeout = 30 * time.Second
