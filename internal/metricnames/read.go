package metricnames

import (
	"time"

	"github.com/acemq/msgaudit/idempotency"
	"github.com/acemq/msgaudit/receiver"
)

// CounterOf is a counter metric and the field of a T it reads.
type CounterOf[T any] struct {
	Metric
	// Read returns the counter's value in t.
	Read func(t T) uint64
}

// GaugeOf is a gauge metric of whole values and the field of a T it reads.
// OpenTelemetry observes it as an int64 gauge.
type GaugeOf[T any] struct {
	Metric
	// Read returns the gauge's value in t.
	Read func(t T) int64
}

// SecondsGaugeOf is a gauge metric of seconds and the duration of a T it
// reads. OpenTelemetry observes it as a float64 gauge.
type SecondsGaugeOf[T any] struct {
	Metric
	// Read returns the gauge's value in t, exported in seconds.
	Read func(t T) time.Duration
}

// Reason is one value of the reason label of ReceiverDuplicates and the
// counter of a receiver.Snapshot it reads.
type Reason struct {
	// Value is the label's value.
	Value string
	// Read returns the counter's value in s.
	Read func(s receiver.Snapshot) uint64
}

// What each receiver metric reads from a receiver.Snapshot. The audit
// tables are exported only once a snapshot says Audited. The store
// latency histogram (StoreCalls, StoreLatency, StoreBuckets) has a shape
// of its own in each exporter and is in no table.
var (
	// ReceiverCounters are the pipeline's counters.
	ReceiverCounters = []CounterOf[receiver.Snapshot]{
		{ReceiverDelivered, func(s receiver.Snapshot) uint64 { return s.Delivered }},
		{ReceiverRedelivered, func(s receiver.Snapshot) uint64 { return s.Redelivered }},
		{ReceiverProcessed, func(s receiver.Snapshot) uint64 { return s.Processed }},
		{ReceiverRetries, func(s receiver.Snapshot) uint64 { return s.Retries }},
		{ReceiverDeadLettered, func(s receiver.Snapshot) uint64 { return s.DeadLettered }},
		{ReceiverHandlerErrors, func(s receiver.Snapshot) uint64 { return s.HandlerErrors }},
		{ReceiverPanics, func(s receiver.Snapshot) uint64 { return s.Panics }},
		{ReceiverReconnects, func(s receiver.Snapshot) uint64 { return s.Reconnects }},
		{ReceiverMissingKeys, func(s receiver.Snapshot) uint64 { return s.MissingKeys }},
		{ReceiverTooOldFailOpen, func(s receiver.Snapshot) uint64 { return s.TooOldFailOpen }},
		{ReceiverAuditBypass, func(s receiver.Snapshot) uint64 { return s.AuditBypass }},
		{ReceiverStoreErrors, func(s receiver.Snapshot) uint64 { return s.StoreErrors }},
		{ReceiverSettleErrors, func(s receiver.Snapshot) uint64 { return s.SettleErrors }},
		{ReceiverForgotten, func(s receiver.Snapshot) uint64 { return s.Forgotten }},
	}
	// ReceiverAuditCounters are the connection audit's counters.
	ReceiverAuditCounters = []CounterOf[receiver.Snapshot]{
		{ReceiverAuditEvictions, func(s receiver.Snapshot) uint64 { return s.Audit.Evictions }},
		{ReceiverAuditRecentEvictions, func(s receiver.Snapshot) uint64 { return s.Audit.RecentEvictions }},
		{ReceiverAuditDestinationEvictions, func(s receiver.Snapshot) uint64 { return s.Audit.AuditEvictions }},
		{ReceiverAuditMalformed, func(s receiver.Snapshot) uint64 { return s.Audit.Malformed }},
		{ReceiverAuditTooLong, func(s receiver.Snapshot) uint64 { return s.Audit.TooLong }},
		{ReceiverAuditTooOld, func(s receiver.Snapshot) uint64 { return s.Audit.TooOld }},
	}
	// ReceiverAuditGauges are the connection audit's gauges.
	ReceiverAuditGauges = []GaugeOf[receiver.Snapshot]{
		{ReceiverAuditProducers, func(s receiver.Snapshot) int64 { return int64(s.Audit.Producers) }},
		{ReceiverAuditQueues, func(s receiver.Snapshot) int64 { return int64(s.Audit.Queues) }},
		{ReceiverAuditTopics, func(s receiver.Snapshot) int64 { return int64(s.Audit.Topics) }},
	}
	// ReceiverGauges and ReceiverSecondsGauges are the in-flight gauges.
	ReceiverGauges = []GaugeOf[receiver.Snapshot]{
		{ReceiverInFlight, func(s receiver.Snapshot) int64 { return int64(s.InFlight) }},
	}
	ReceiverSecondsGauges = []SecondsGaugeOf[receiver.Snapshot]{
		{ReceiverOldestInFlight, func(s receiver.Snapshot) time.Duration { return s.OldestInFlight }},
	}
	// ReceiverDuplicateReasons are the series of ReceiverDuplicates, one
	// per value of LabelReason.
	ReceiverDuplicateReasons = []Reason{
		{"audit", func(s receiver.Snapshot) uint64 { return s.DuplicatesAudit }},
		{"store", func(s receiver.Snapshot) uint64 { return s.DuplicatesStore }},
		{"in-flight", func(s receiver.Snapshot) uint64 { return s.DuplicatesInFlight }},
		{"other", func(s receiver.Snapshot) uint64 { return s.DuplicatesOther }},
	}
)

// TransportCounters is what each transport metric reads from a
// receiver.TransportStats; Generation is not exported.
var TransportCounters = []CounterOf[receiver.TransportStats]{
	{TransportConnects, func(s receiver.TransportStats) uint64 { return s.Connects }},
	{TransportReconnects, func(s receiver.TransportStats) uint64 { return s.Reconnects }},
	{TransportConnectErrors, func(s receiver.TransportStats) uint64 { return s.ConnectErrors }},
	{TransportLost, func(s receiver.TransportStats) uint64 { return s.Lost }},
	{TransportAcks, func(s receiver.TransportStats) uint64 { return s.Acks }},
	{TransportRequeues, func(s receiver.TransportStats) uint64 { return s.Requeues }},
	{TransportRetryCopies, func(s receiver.TransportStats) uint64 { return s.RetriesSent }},
	{TransportLocalRetries, func(s receiver.TransportStats) uint64 { return s.LocalRetries }},
	{TransportDeadLetterCopies, func(s receiver.TransportStats) uint64 { return s.DeadLetters }},
	{TransportDeadLetterErrors, func(s receiver.TransportStats) uint64 { return s.DeadLetterErrors }},
	{TransportOversized, func(s receiver.TransportStats) uint64 { return s.Oversized }},
	{TransportDropped, func(s receiver.TransportStats) uint64 { return s.Dropped }},
	{TransportStaleAcks, func(s receiver.TransportStats) uint64 { return s.StaleAcks }},
	{TransportAckErrors, func(s receiver.TransportStats) uint64 { return s.AckErrors }},
}

// What each backlog gauge reads from an idempotency.Backlog.
// BacklogSampleErrors counts failed samples, no field of one, and is in
// no table.
var (
	// BacklogGauges are the backlog's counts.
	BacklogGauges = []GaugeOf[idempotency.Backlog]{
		{BacklogHeld, func(b idempotency.Backlog) int64 { return b.Held }},
		{BacklogRows, func(b idempotency.Backlog) int64 { return b.Rows }},
	}
	// BacklogSecondsGauges are the backlog's ages.
	BacklogSecondsGauges = []SecondsGaugeOf[idempotency.Backlog]{
		{BacklogOldestHeld, func(b idempotency.Backlog) time.Duration { return b.OldestHeld }},
		{BacklogOldestRow, func(b idempotency.Backlog) time.Duration { return b.OldestRow }},
	}
)
