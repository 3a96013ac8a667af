// Package metricfixture holds the known values the tests of the metrics
// exporters (promexport, otelmetric) and of internal/metricnames read:
// every field set, each to a value of its own, so that a metric read
// from the wrong field shows.
package metricfixture

import (
	"time"

	"github.com/acemq/msgaudit/connaudit"
	"github.com/acemq/msgaudit/receiver"
)

// Snapshot returns a receiver.Snapshot with every field set, each to a
// value of its own (1 to 28; the store latency 1.5 s over 78 calls, the
// oldest in flight 2.5 s), and Audited.
func Snapshot() receiver.Snapshot {
	s := receiver.Snapshot{
		Delivered: 1, Redelivered: 2, Processed: 3,
		DuplicatesAudit: 4, DuplicatesStore: 5, DuplicatesInFlight: 6, DuplicatesOther: 7,
		Retries: 8, DeadLettered: 9, HandlerErrors: 10, Panics: 11, Reconnects: 12,
		MissingKeys: 13, TooOldFailOpen: 14, AuditBypass: 15,
		StoreErrors: 16, SettleErrors: 17, Forgotten: 18,
		StoreCalls: 78, StoreLatency: 1500 * time.Millisecond,
		StoreBuckets: []uint64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12},
		Audited:      true,
		Audit:        connaudit.Stats{AuditEvictions: 21, Queues: 26, Topics: 27},
		InFlight:     28, OldestInFlight: 2500 * time.Millisecond,
	}
	s.Audit.Evictions, s.Audit.RecentEvictions = 19, 20
	s.Audit.Malformed, s.Audit.TooLong, s.Audit.TooOld, s.Audit.Producers = 22, 23, 24, 25
	return s
}

// Stats returns a receiver.TransportStats with every counter set, each
// to a value of its own (1 to 15, Generation last).
func Stats() receiver.TransportStats {
	return receiver.TransportStats{Connects: 1, Reconnects: 2, ConnectErrors: 3, Lost: 4, Acks: 5,
		Requeues: 6, RetriesSent: 7, LocalRetries: 8, DeadLetters: 9, DeadLetterErrors: 10,
		Oversized: 11, Dropped: 12, StaleAcks: 13, AckErrors: 14, Generation: 15}
}
