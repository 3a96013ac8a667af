// Package consumerkit holds what the STOMP, RabbitMQ and NATS consumers
// share beside the pipeline itself: backoff defaults, a context-bounded
// sleep, the one log line that says what the duplicate detection survives,
// and the transport counters behind receiver.TransportStats.
package consumerkit

import (
	"context"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/acemq/msgaudit/receiver"
)

// WithDefaults fills b's zero (or negative) fields with initial, max and
// jitter.
func WithDefaults(b receiver.Backoff, initial, max time.Duration, jitter float64) receiver.Backoff {
	if b.Initial <= 0 {
		b.Initial = initial
	}
	if b.Max <= 0 {
		b.Max = max
	}
	if b.Jitter <= 0 {
		b.Jitter = jitter
	}
	return b
}

// Sleep waits d or until ctx is done; it reports whether the full delay
// elapsed (a d of zero or less elapses at once unless ctx is done).
func Sleep(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// LogGuarantee logs, under the consumer's name, what the duplicate
// detection p configures survives.
func LogGuarantee(log *slog.Logger, name string, p receiver.Config) {
	switch {
	case p.Inbox != nil:
		log.Info(name+": transactional inbox: each delivery's key commits in the handler's own transaction, so a crash between effect and acknowledgement never applies a message twice",
			"inbox", fmt.Sprintf("%T", p.Inbox))
	case p.Store != nil:
		log.Info(name+": durable duplicate detection: finished work is recognised across restarts and by every consumer sharing the store; a crash between the handler's effect and the store's confirm can apply a message again once its claim lapses",
			"store", fmt.Sprintf("%T", p.Store))
	case p.MemoryOnly:
		log.Warn(name + ": memory-only duplicate detection (Pipeline.MemoryOnly): duplicates are absorbed while this process runs, across reconnects; after a restart, or on another consumer, a redelivery of finished work is applied again")
	}
}

// Counters are a consumer's transport counters, one per field of
// receiver.TransportStats but Generation, each safe for concurrent use.
// A transport adds to those it keeps; the others stay zero.
type Counters struct {
	Connects, Reconnects, ConnectErrors, Lost         atomic.Uint64
	Acks, Requeues, RetriesSent, LocalRetries         atomic.Uint64
	DeadLetters, DeadLetterErrors, Oversized, Dropped atomic.Uint64
	StaleAcks, AckErrors                              atomic.Uint64
}

// Stats reads the counters, with gen as the current connection's number.
func (c *Counters) Stats(gen uint64) receiver.TransportStats {
	return receiver.TransportStats{
		Connects: c.Connects.Load(), Reconnects: c.Reconnects.Load(), ConnectErrors: c.ConnectErrors.Load(),
		Lost: c.Lost.Load(), Acks: c.Acks.Load(), Requeues: c.Requeues.Load(),
		RetriesSent: c.RetriesSent.Load(), LocalRetries: c.LocalRetries.Load(),
		DeadLetters: c.DeadLetters.Load(), DeadLetterErrors: c.DeadLetterErrors.Load(),
		Oversized: c.Oversized.Load(), Dropped: c.Dropped.Load(),
		StaleAcks: c.StaleAcks.Load(), AckErrors: c.AckErrors.Load(),
		Generation: gen,
	}
}
