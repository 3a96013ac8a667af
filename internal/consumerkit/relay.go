package consumerkit

import (
	"context"
	"log/slog"

	"github.com/acemq/msgaudit/receiver"
)

// StartRelay runs an outbox relay beside a consumer, as its Config.Outbox
// asks: it makes a publisher with newPub, on a connection of its own, and
// runs run (the Outbox's Run) with it until ctx ends, making a new
// publisher when one cannot be made (the broker is down) with delays from
// backoff. stop ends it and returns once the relay and its publisher are
// closed. name prefixes the log lines.
func StartRelay[P any](ctx context.Context, log *slog.Logger, name string, backoff receiver.Backoff,
	newPub func(context.Context) (P, error), closePub func(P), run func(context.Context, P) error) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for attempt := 1; ctx.Err() == nil; attempt++ {
			p, err := newPub(ctx)
			if err != nil {
				if ctx.Err() != nil {
					return
				}
				log.Warn(name+": outbox relay: cannot connect its publisher; retrying", "err", err, "attempt", attempt)
				if !Sleep(ctx, backoff.Delay(attempt)) {
					return
				}
				continue
			}
			err = run(ctx, p)
			closePub(p)
			if err != nil && ctx.Err() == nil {
				log.Error(name+": outbox relay stopped", "err", err)
			}
			return
		}
	}()
	return func() { cancel(); <-done }
}
