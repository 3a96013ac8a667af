// Package metricnames is the one table of the metrics msgaudit exports:
// name, help text, kind, unit and labels. Both exporters read it, promexport
// (Prometheus) and the otelmetric module (OpenTelemetry), so that a metric
// has one name and one meaning whichever a program scrapes. The read
// tables (ReceiverCounters, TransportCounters, BacklogGauges, …) say which
// field of a receiver.Snapshot, a receiver.TransportStats or an
// idempotency.Backlog each metric reads, and the exporters iterate them.
// It imports neither client; docs/metrics.md lists the same table for
// readers.
package metricnames

// Kind is how a metric's value moves.
type Kind int

const (
	// Counter only grows (until the process restarts).
	Counter Kind = iota + 1
	// Gauge is a value at the time of the scrape, up or down.
	Gauge
	// Histogram counts observations in buckets, with their sum and count.
	// OpenTelemetry has no observable histogram: otelmetric exports the
	// sum and the count as two counters (Name+"_sum", Name+"_count").
	Histogram
)

// String returns "counter", "gauge" or "histogram".
func (k Kind) String() string {
	switch k {
	case Counter:
		return "counter"
	case Gauge:
		return "gauge"
	case Histogram:
		return "histogram"
	}
	return "unknown"
}

// The labels.
const (
	// LabelTransport is the constant label of the receiver and transport
	// metrics, the value a program passes (e.g. "stomp", "amqp").
	LabelTransport = "transport"
	// LabelReason is the tier that knew a duplicate: "audit", "store",
	// "in-flight" or "other".
	LabelReason = "reason"
	// LabelStore is the constant label of the backlog metrics, the value
	// a program passes (e.g. "pg", "orders-inbox").
	LabelStore = "store"
)

// Metric describes one exported metric.
type Metric struct {
	// Name is the Prometheus name, suffixes included (_total, _seconds).
	// OpenTelemetry instruments carry the same name.
	Name string
	// Help is the Prometheus help text and the instrument's description.
	Help string
	// Kind is counter, gauge or histogram.
	Kind Kind
	// Unit is the UCUM unit OpenTelemetry records: "s" for seconds, a
	// count's annotation such as "{delivery}" otherwise. OpenTelemetry's
	// Prometheus exporter drops annotations and finds "seconds" already
	// in the name, so it adds no unit suffix.
	Unit string
	// Labels are the metric's label names, the constant one first.
	Labels []string
}

var (
	transport       = []string{LabelTransport}
	transportReason = []string{LabelTransport, LabelReason}
	store           = []string{LabelStore}
)

// The receiver metrics, read from a receiver.Snapshot.
var (
	ReceiverDelivered      = Metric{"msgaudit_receiver_delivered_total", "Deliveries handed to the receiver.", Counter, "{delivery}", transport}
	ReceiverRedelivered    = Metric{"msgaudit_receiver_redelivered_total", "Deliveries carrying the broker's redelivered flag.", Counter, "{delivery}", transport}
	ReceiverProcessed      = Metric{"msgaudit_receiver_processed_total", "Handler successes acknowledged as new work.", Counter, "{delivery}", transport}
	ReceiverRetries        = Metric{"msgaudit_receiver_retries_total", "Deliveries handed back for a retry.", Counter, "{delivery}", transport}
	ReceiverDeadLettered   = Metric{"msgaudit_receiver_dead_lettered_total", "Deliveries dead-lettered.", Counter, "{delivery}", transport}
	ReceiverHandlerErrors  = Metric{"msgaudit_receiver_handler_errors_total", "Handler errors, panics included.", Counter, "{error}", transport}
	ReceiverPanics         = Metric{"msgaudit_receiver_panics_total", "Recovered handler panics.", Counter, "{panic}", transport}
	ReceiverReconnects     = Metric{"msgaudit_receiver_reconnects_total", "Transport reconnects.", Counter, "{connection}", transport}
	ReceiverMissingKeys    = Metric{"msgaudit_receiver_missing_keys_total", "Deliveries without a usable idempotency key.", Counter, "{delivery}", transport}
	ReceiverTooOldFailOpen = Metric{"msgaudit_receiver_too_old_fail_open_total", "Ids below the audit window treated as new without a durable store.", Counter, "{delivery}", transport}
	ReceiverAuditBypass    = Metric{"msgaudit_receiver_audit_bypass_total", "Keys the audit could not parse, checked by the store only.", Counter, "{delivery}", transport}
	ReceiverStoreErrors    = Metric{"msgaudit_receiver_store_errors_total", "Failed idempotency store calls.", Counter, "{error}", transport}
	ReceiverSettleErrors   = Metric{"msgaudit_receiver_settle_errors_total", "Failed settlements (confirm errors).", Counter, "{error}", transport}
	ReceiverForgotten      = Metric{"msgaudit_receiver_forgotten_total", "Audit bits rolled back for deliveries that come back unrun.", Counter, "{delivery}", transport}

	// The connection audit's metrics, exported only once a snapshot says
	// Audited.
	ReceiverAuditEvictions            = Metric{"msgaudit_receiver_audit_evictions_total", "Producers evicted from the connection audit to make room.", Counter, "{producer}", transport}
	ReceiverAuditRecentEvictions      = Metric{"msgaudit_receiver_audit_recent_evictions_total", "Producers evicted while still active within their window (producer churn: raise MaxProducers or investigate a producer-key flood).", Counter, "{producer}", transport}
	ReceiverAuditDestinationEvictions = Metric{"msgaudit_receiver_audit_destination_evictions_total", "Destination audits evicted from the connection audit by MaxDestinations or MaxConsumers (a destination flood: their duplicates pass undetected).", Counter, "{audit}", transport}
	ReceiverAuditMalformed            = Metric{"msgaudit_receiver_audit_malformed_total", "Ids rejected by the connection audit as malformed.", Counter, "{id}", transport}
	ReceiverAuditTooLong              = Metric{"msgaudit_receiver_audit_too_long_total", "Ids rejected by the connection audit for exceeding MaxIDLength.", Counter, "{id}", transport}
	ReceiverAuditTooOld               = Metric{"msgaudit_receiver_audit_too_old_total", "Ids below their producer's audit window.", Counter, "{id}", transport}
	ReceiverAuditProducers            = Metric{"msgaudit_receiver_audit_producers", "Producers tracked by the connection audit now.", Gauge, "{producer}", transport}
	ReceiverAuditQueues               = Metric{"msgaudit_receiver_audit_queues", "Queue audits of the connection audit now.", Gauge, "{audit}", transport}
	ReceiverAuditTopics               = Metric{"msgaudit_receiver_audit_topics", "Topic audits of the connection audit now.", Gauge, "{audit}", transport}

	ReceiverDuplicates     = Metric{"msgaudit_receiver_duplicates_total", "Duplicates absorbed, by the tier that knew.", Counter, "{delivery}", transportReason}
	ReceiverStoreLatency   = Metric{"msgaudit_receiver_store_latency_seconds", "Latency of idempotency store calls.", Histogram, "s", transport}
	ReceiverInFlight       = Metric{"msgaudit_receiver_in_flight", "Deliveries inside the pipeline now (waiting for a handler, running it, or settling).", Gauge, "{delivery}", transport}
	ReceiverOldestInFlight = Metric{"msgaudit_receiver_oldest_in_flight_seconds", "How long the oldest delivery inside the pipeline has been there (0 with none): growing without bound is a stuck handler or settlement.", Gauge, "s", transport}
)

// The transport metrics, read from a receiver.TransportStats.
var (
	TransportConnects         = Metric{"msgaudit_transport_connects_total", "Successful broker connections.", Counter, "{connection}", transport}
	TransportReconnects       = Metric{"msgaudit_transport_reconnects_total", "Connections made after a connection loss.", Counter, "{connection}", transport}
	TransportConnectErrors    = Metric{"msgaudit_transport_connect_errors_total", "Failed connection attempts.", Counter, "{error}", transport}
	TransportLost             = Metric{"msgaudit_transport_lost_total", "Connections or channels that broke while consuming (RabbitMQ).", Counter, "{connection}", transport}
	TransportAcks             = Metric{"msgaudit_transport_acks_total", "Deliveries acknowledged (RabbitMQ).", Counter, "{delivery}", transport}
	TransportRequeues         = Metric{"msgaudit_transport_requeues_total", "Deliveries handed back to the broker for a retry (RabbitMQ).", Counter, "{delivery}", transport}
	TransportRetryCopies      = Metric{"msgaudit_transport_retry_copies_total", "Retry copies committed with the original's ACK (STOMP).", Counter, "{message}", transport}
	TransportLocalRetries     = Metric{"msgaudit_transport_local_retries_total", "Retries run in place (STOMP).", Counter, "{delivery}", transport}
	TransportDeadLetterCopies = Metric{"msgaudit_transport_dead_letter_copies_total", "Dead-letter copies the broker took before the original was acknowledged.", Counter, "{message}", transport}
	TransportDeadLetterErrors = Metric{"msgaudit_transport_dead_letter_errors_total", "Dead-letter publishes that failed; the original was handed back (RabbitMQ).", Counter, "{error}", transport}
	TransportOversized        = Metric{"msgaudit_transport_oversized_total", "Deliveries over the size limits, dead-lettered unhandled.", Counter, "{delivery}", transport}
	TransportDropped          = Metric{"msgaudit_transport_dropped_total", "Deliveries dropped unprocessed with their connection (sent again by the broker).", Counter, "{delivery}", transport}
	TransportStaleAcks        = Metric{"msgaudit_transport_stale_acks_total", "Acknowledgements not sent because the delivery's connection was gone.", Counter, "{delivery}", transport}
	TransportAckErrors        = Metric{"msgaudit_transport_ack_errors_total", "Acknowledgement failures.", Counter, "{error}", transport}
)

// The backlog metrics, read from an idempotency.Backlog a store or an
// inbox samples. A failed sample keeps the last good values and counts in
// BacklogSampleErrors.
var (
	BacklogHeld         = Metric{"msgaudit_backlog_held", "Claims taken and neither confirmed nor released whose lease has not run out (0 for an inbox).", Gauge, "{claim}", store}
	BacklogOldestHeld   = Metric{"msgaudit_backlog_oldest_held_seconds", "How long the oldest held claim has been held (0 with none): growing without bound is a handler that never ends.", Gauge, "s", store}
	BacklogRows         = Metric{"msgaudit_backlog_rows", "Keys kept: held, confirmed, and expired ones not yet purged (the database's estimate on PostgreSQL and MySQL).", Gauge, "{key}", store}
	BacklogOldestRow    = Metric{"msgaudit_backlog_oldest_row_seconds", "Age of the oldest key kept (0 with none): growing past retention plus the purge interval is a purge that does not run or keep up.", Gauge, "s", store}
	BacklogSampleErrors = Metric{"msgaudit_backlog_sample_errors_total", "Backlog samples that failed or timed out; the gauges keep the last good sample.", Counter, "{error}", store}
)

// Receiver lists the receiver metrics, Transport the transport metrics,
// Backlog the backlog metrics; All lists the three tables in that order.
var (
	Receiver = []Metric{
		ReceiverDelivered, ReceiverRedelivered, ReceiverProcessed, ReceiverRetries, ReceiverDeadLettered,
		ReceiverHandlerErrors, ReceiverPanics, ReceiverReconnects, ReceiverMissingKeys, ReceiverTooOldFailOpen,
		ReceiverAuditBypass, ReceiverStoreErrors, ReceiverSettleErrors, ReceiverForgotten,
		ReceiverAuditEvictions, ReceiverAuditRecentEvictions, ReceiverAuditDestinationEvictions,
		ReceiverAuditMalformed, ReceiverAuditTooLong, ReceiverAuditTooOld,
		ReceiverAuditProducers, ReceiverAuditQueues, ReceiverAuditTopics,
		ReceiverDuplicates, ReceiverStoreLatency, ReceiverInFlight, ReceiverOldestInFlight,
	}
	Transport = []Metric{
		TransportConnects, TransportReconnects, TransportConnectErrors, TransportLost, TransportAcks,
		TransportRequeues, TransportRetryCopies, TransportLocalRetries, TransportDeadLetterCopies,
		TransportDeadLetterErrors, TransportOversized, TransportDropped, TransportStaleAcks, TransportAckErrors,
	}
	Backlog = []Metric{BacklogHeld, BacklogOldestHeld, BacklogRows, BacklogOldestRow, BacklogSampleErrors}
	All     = append(append(append([]Metric(nil), Receiver...), Transport...), Backlog...)
)
