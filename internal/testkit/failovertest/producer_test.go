//go:build unix

package failovertest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync/atomic"
	"time"

	"github.com/go-stomp/stomp/v3"
)

// txLimit bounds one producer transaction, from BEGIN to the COMMIT's
// receipt. A COMMIT queued in go-stomp as its connection broke is never
// answered and never failed: without this bound the producer would wait
// for it for good.
const txLimit = 30 * time.Second

// producer sends persistent messages to whichever broker of the pair is
// master, in transactions committed with a receipt. A transaction whose
// commit is not confirmed (the master died) is sent again, whole, to the
// broker that took over: the broker rolled it back, or it committed and
// its copies are on the queue twice, under new message ids and the same
// keys.
type producer struct {
	p    *pair
	conn *stomp.Conn
	nc   net.Conn // conn's socket
	// sent counts the messages in confirmed transactions; retried the
	// messages of transactions sent again, and unconfirmed those among
	// them whose COMMIT had been sent without a receipt coming back (the
	// only ones the dead master may have committed); stalled the
	// transactions given up after txLimit; reconnects the connections
	// made after the first.
	sent, retried, unconfirmed, stalled, reconnects atomic.Int64
	connects                                        int
	// phase says what the producer is doing, for a report on a stall.
	phase atomic.Pointer[string]
}

// setPhase records what the producer is doing.
func (pr *producer) setPhase(format string, args ...any) {
	s := fmt.Sprintf(format, args...) + " since " + time.Now().Format("15:04:05.000")
	pr.phase.Store(&s)
}

// state reports the producer's counters and phase.
func (pr *producer) state() string {
	phase := "not started"
	if p := pr.phase.Load(); p != nil {
		phase = *p
	}
	return fmt.Sprintf("producer: %s; %d messages confirmed, %d sent again, %d transactions given up after %v, %d reconnects",
		phase, pr.sent.Load(), pr.retried.Load(), pr.stalled.Load(), txLimit, pr.reconnects.Load())
}

// connect opens a connection to the master, trying both brokers until
// one accepts or ctx ends.
func (pr *producer) connect(ctx context.Context) error {
	pr.setPhase("connecting")
	for {
		for i := range pr.p.addrs {
			c, nc, err := pr.p.dialRaw(ctx, i)
			if err == nil {
				pr.conn, pr.nc = c, nc
				if pr.connects++; pr.connects > 1 {
					pr.reconnects.Add(1)
				}
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("failovertest: producer: no master: %w", ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// send sends keys to queue in one transaction, again and again until a
// commit is confirmed.
func (pr *producer) send(ctx context.Context, queue string, keys []string) error {
	for attempt := 0; ; attempt++ {
		if pr.conn == nil {
			if err := pr.connect(ctx); err != nil {
				return err
			}
		}
		if attempt > 0 {
			pr.retried.Add(int64(len(keys)))
		}
		pr.setPhase("sending %s..%s (attempt %d)", keys[0], keys[len(keys)-1], attempt+1)
		committing, err := pr.tryWithin(queue, keys)
		if err == nil {
			pr.sent.Add(int64(len(keys)))
			return nil
		}
		if committing {
			pr.unconfirmed.Add(int64(len(keys)))
		}
		pr.drop()
		if err := ctx.Err(); err != nil {
			return err
		}
	}
}

// errStalled is tryWithin's error for a transaction given up after
// txLimit.
var errStalled = errors.New("failovertest: producer: transaction not confirmed within the limit")

// tryWithin is try, given up after txLimit: the socket is closed, which
// ends the connection, and the call is abandoned. Its outcome is unknown,
// so it counts as committing.
func (pr *producer) tryWithin(queue string, keys []string) (committing bool, err error) {
	type result struct {
		committing bool
		err        error
	}
	done := make(chan result, 1)
	conn := pr.conn
	go func() {
		c, err := try(conn, queue, keys)
		done <- result{c, err}
	}()
	t := time.NewTimer(txLimit)
	defer t.Stop()
	select {
	case r := <-done:
		return r.committing, r.err
	case <-t.C:
		pr.stalled.Add(1)
		_ = pr.nc.Close()
		return true, errStalled
	}
}

// try sends keys in one transaction on conn; committing reports whether
// the error, if any, came from the COMMIT.
func try(conn *stomp.Conn, queue string, keys []string) (committing bool, err error) {
	tx, err := conn.BeginWithError()
	if err != nil {
		return false, err
	}
	for _, k := range keys {
		if err := tx.Send(queue, "text/plain", []byte(k),
			stomp.SendOpt.Header("persistent", "true"), stomp.SendOpt.Header(keyHeader, k)); err != nil {
			return false, err
		}
	}
	return true, tx.CommitWithReceipt()
}

// drop closes the connection without waiting for the broker.
func (pr *producer) drop() {
	_ = pr.nc.Close()
	go func(c *stomp.Conn) { _ = c.MustDisconnect() }(pr.conn)
	pr.conn, pr.nc = nil, nil
}

// close disconnects, waiting at most 10 s for the broker's receipt
// before it closes the socket.
func (pr *producer) close() {
	if pr.conn == nil {
		return
	}
	done := make(chan struct{})
	go func(c *stomp.Conn) { _ = c.Disconnect(); close(done) }(pr.conn)
	select {
	case <-done:
	case <-time.After(10 * time.Second):
	}
	_ = pr.nc.Close()
}
