// Package purgeloop runs the purge of expired rows that the SQL
// idempotency stores and the transactional inbox start on their own
// (Options.PurgeInterval), and counts every purge, automatic or called.
package purgeloop

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"
)

// Counters count purges: finished passes, rows deleted, failed passes and
// the time spent. The zero value is ready; it is safe for concurrent use.
type Counters struct {
	runs, rows, errors, nanos atomic.Uint64
}

// Observe counts one purge pass that deleted rows in d and ended with err.
func (c *Counters) Observe(rows int64, d time.Duration, err error) {
	c.runs.Add(1)
	if rows > 0 {
		c.rows.Add(uint64(rows))
	}
	c.nanos.Add(uint64(d))
	if err != nil {
		c.errors.Add(1)
	}
}

// Load returns the counters.
func (c *Counters) Load() (runs, rows, errors uint64, busy time.Duration) {
	return c.runs.Load(), c.rows.Load(), c.errors.Load(), time.Duration(c.nanos.Load())
}

// Loop calls a purge every interval until Stop.
type Loop struct {
	cancel context.CancelFunc
	done   chan struct{}
	once   sync.Once
}

// Start starts a Loop that calls purge every interval (the first call one
// interval after Start) and logs a failed call to log as a warning naming
// what. Each call's ctx ends when Stop is called, so a purge in progress
// stops at its next statement. interval <= 0 starts nothing: the Loop's
// Stop is then a no-op. log may be nil.
func Start(interval time.Duration, what string, log *slog.Logger, purge func(ctx context.Context) (int64, error)) *Loop {
	l := &Loop{done: make(chan struct{})}
	if interval <= 0 {
		close(l.done)
		l.cancel = func() {}
		return l
	}
	ctx, cancel := context.WithCancel(context.Background())
	l.cancel = cancel
	go l.run(ctx, interval, what, log, purge)
	return l
}

func (l *Loop) run(ctx context.Context, interval time.Duration, what string, log *slog.Logger, purge func(ctx context.Context) (int64, error)) {
	defer close(l.done)
	t := time.NewTimer(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		n, err := purge(ctx)
		if err != nil && ctx.Err() == nil && log != nil {
			log.Warn(what+": purge of expired rows failed; next try in one interval", "err", err, "deleted", n, "interval", interval)
		}
		// The next pass starts one interval after this one ended, so a
		// pass longer than the interval never runs back to back.
		t.Reset(interval)
	}
}

// Done is closed once the Loop's goroutine has returned (at once for a
// Loop that started none): the tests' leak check.
func (l *Loop) Done() <-chan struct{} { return l.done }

// Stop stops the Loop and waits until a purge in progress has returned.
// It may be called more than once.
func (l *Loop) Stop() {
	l.once.Do(l.cancel)
	<-l.done
}

// Paces of Batches: how many times as long as a batch took it waits after
// the batch.
const (
	// Unpaced runs the batches back to back (an explicit Purge call).
	Unpaced = 0
	// Server is the automatic purge's pace on PostgreSQL (and the MySQL
	// store's): it holds a connection and the server's time at most half
	// of the time. Deliveries do not wait for its row locks (it deletes
	// expired rows only, skipping locked ones on PostgreSQL), so what it
	// costs them is the server's CPU and I/O.
	Server = 1
	// MySQL is the inbox's automatic purge's pace on MySQL and MariaDB,
	// whose batched DELETE costs the server more per row than
	// PostgreSQL's: at the Server pace it cost deliveries 19 % on a
	// 2-core machine. It holds the server at most a quarter of the time.
	MySQL = 3
	// SQLite is the automatic purge's pace on SQLite, where a batch holds
	// the database's one write lock and every delivery waits for it: the
	// purge holds it at most a tenth of the time, so deliveries keep 90 %
	// of their throughput, and a delivery waiting for the lock gets it
	// between two batches.
	SQLite = 9
)

// Batches runs one, a statement deleting at most batch rows, until it
// deletes fewer than batch, and returns the rows deleted in all. After
// each batch it waits pace times as long as the batch took (at least a
// millisecond when pace > 0): see the constants. It returns early, with
// what was deleted so far, when ctx ends or one fails.
func Batches(ctx context.Context, batch, pace int, one func(ctx context.Context) (int64, error)) (int64, error) {
	var total int64
	for {
		if err := ctx.Err(); err != nil {
			return total, err
		}
		t0 := time.Now()
		n, err := one(ctx)
		total += n
		if err != nil || n < int64(batch) {
			return total, err
		}
		if pace > 0 {
			t := time.NewTimer(max(time.Duration(pace)*time.Since(t0), time.Millisecond))
			select {
			case <-ctx.Done():
				t.Stop()
				return total, ctx.Err()
			case <-t.C:
			}
		}
	}
}
