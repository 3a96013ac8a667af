package consumerkit

import (
	"testing"

	"github.com/acemq/msgaudit/receiver"
)

// TestCountersStats: each counter reaches its own TransportStats field.
func TestCountersStats(t *testing.T) {
	var c Counters
	for i, a := range []interface{ Add(uint64) uint64 }{
		&c.Connects, &c.Reconnects, &c.ConnectErrors, &c.Lost, &c.Acks, &c.Requeues, &c.RetriesSent,
		&c.LocalRetries, &c.DeadLetters, &c.DeadLetterErrors, &c.Oversized, &c.Dropped, &c.StaleAcks, &c.AckErrors,
	} {
		a.Add(uint64(i + 1))
	}
	want := receiver.TransportStats{Connects: 1, Reconnects: 2, ConnectErrors: 3, Lost: 4, Acks: 5, Requeues: 6,
		RetriesSent: 7, LocalRetries: 8, DeadLetters: 9, DeadLetterErrors: 10, Oversized: 11, Dropped: 12,
		StaleAcks: 13, AckErrors: 14, Generation: 15}
	if got := c.Stats(15); got != want {
		t.Errorf("Stats(15) = %+v\nwant        %+v", got, want)
	}
}
