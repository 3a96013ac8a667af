package e2e

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/acemq/msgaudit/connaudit"
	"github.com/acemq/msgaudit/internal/stompsub"
	"github.com/acemq/msgaudit/receiver"
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

// preload sends count persistent messages; the last one asks for a receipt,
// which ActiveMQ sends after it has processed every frame before it.
func (b *stompBroker) preload(ctx context.Context, n names, count int, body []byte) error {
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
		if err := c.Send(queueDest(n), "application/octet-stream", body, opts...); err != nil {
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
func (b *stompBroker) consume(ctx context.Context, p *plan, v variant, n names, be *backend) (int, error) {
	cnt := newCounter(p.Messages)
	if v.kind == bare {
		err := b.bare(ctx, p, n, cnt)
		return cnt.handled(), err
	}
	cfg := stompconsumer.Config{
		Addresses:             []string{b.addr},
		Prefetch:              p.Prefetch,
		Concurrency:           p.Concurrency,
		InFlight:              p.InFlight,
		Store:                 be.store,
		Inbox:                 be.inbox,
		MemoryOnly:            be.store == nil && be.inbox == nil, // the audit-only variant, on purpose
		DeadLetterDestination: dlqDest(n),
		ConnectRetries:        1,
		Subscriptions: []stompconsumer.Subscription{{
			Destination: queueDest(n),
			Handler:     be.handler(cnt.inc),
		}},
	}
	if be.store != nil && p.groupsStore() {
		a, err := connaudit.New(connaudit.Options{}) // the consumer's default audit
		if err != nil {
			return 0, err
		}
		if cfg.Receiver, err = p.receiver(be, receiver.ConnAudit(a)); err != nil {
			return 0, err
		}
		cfg.Store = nil
	}
	c, err := stompconsumer.New(cfg)
	if err != nil {
		return 0, err
	}
	rctx, stop := context.WithCancel(ctx)
	defer stop()
	ran := make(chan error, 1)
	go func() { ran <- c.Run(rctx) }()
	werr := cnt.wait(ctx, ran, p.Timeout)
	stop()
	if werr != nil {
		return cnt.handled(), werr
	}
	if err := <-ran; err != nil {
		return cnt.handled(), fmt.Errorf("stopping the consumer: %w", err)
	}
	st := c.Stats()
	if st.RetriesSent+st.DeadLettersSent+st.AckErrors+st.Dropped+st.StaleAcks > 0 || st.Connects != 1 {
		return cnt.handled(), fmt.Errorf("the consumer did not run cleanly: %+v", st)
	}
	return cnt.handled(), nil
}

// bare is the client a user writes without msgaudit: one goroutine,
// ack:client-individual, ACK after the handler.
func (b *stompBroker) bare(ctx context.Context, p *plan, n names, cnt *counter) error {
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
	go func() {
		for m := range sub.C {
			if m.Err != nil {
				errc <- m.Err
				return
			}
			cnt.inc()
			if err := c.Ack(m); err != nil {
				errc <- err
				return
			}
			if cnt.handled() == p.Messages {
				return
			}
		}
	}()
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
