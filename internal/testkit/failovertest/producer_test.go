//go:build unix

package failovertest

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/go-stomp/stomp/v3"
)

// producer sends persistent messages to whichever broker of the pair is
// master, in transactions committed with a receipt. A transaction whose
// commit is not confirmed (the master died) is sent again, whole, to the
// broker that took over: the broker rolled it back, or it committed and
// its copies are on the queue twice, under new message ids and the same
// keys.
type producer struct {
	p    *pair
	conn *stomp.Conn
	// sent counts the messages in confirmed transactions; retried the
	// messages of transactions sent again, and unconfirmed those among
	// them whose COMMIT had been sent without a receipt coming back (the
	// only ones the dead master may have committed); reconnects the
	// connections made after the first.
	sent, retried, unconfirmed, reconnects atomic.Int64
	connects                               int
}

// connect opens a connection to the master, trying both brokers until
// one accepts or ctx ends.
func (pr *producer) connect(ctx context.Context) error {
	for {
		for i := range pr.p.addrs {
			c, err := pr.p.dial(ctx, i)
			if err == nil {
				pr.conn = c
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
		committing, err := pr.try(queue, keys)
		if err == nil {
			pr.sent.Add(int64(len(keys)))
			return nil
		}
		if committing {
			pr.unconfirmed.Add(int64(len(keys)))
		}
		_ = pr.conn.MustDisconnect()
		pr.conn = nil
		if err := ctx.Err(); err != nil {
			return err
		}
	}
}

// try sends keys in one transaction; committing reports whether the
// error, if any, came from the COMMIT.
func (pr *producer) try(queue string, keys []string) (committing bool, err error) {
	tx, err := pr.conn.BeginWithError()
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

func (pr *producer) close() {
	if pr.conn != nil {
		_ = pr.conn.Disconnect()
	}
}
