// Package otelmetric exports msgaudit's metrics as OpenTelemetry metrics:
// the same metrics promexport exports to Prometheus, under the same names,
// as observable instruments whose callbacks read the plain snapshots
// (receiver.Metrics' Snapshot, a consumer's Stats, a store's Backlog) at
// every collection:
//
//	meter := provider.Meter("github.com/acemq/msgaudit/otelmetric")
//	reg, err := otelmetric.Receiver(meter, c.Metrics().Snapshot, "stomp")
//	...
//	defer reg.Unregister()
//
// Each function returns the metric.Registration of its callback;
// Unregister stops the callback, and the instruments then report nothing.
// docs/metrics.md lists every metric with its kind, labels and meaning.
//
// # Names
//
// An instrument carries the Prometheus name, suffixes included
// (msgaudit_receiver_delivered_total, msgaudit_receiver_oldest_in_flight_seconds),
// the help text as its description and a UCUM unit: "s" for seconds, an
// annotation such as "{delivery}" for a count. OpenTelemetry's Prometheus
// exporter (go.opentelemetry.io/otel/exporters/prometheus) with its default
// translation strategy drops annotations, adds no "seconds" to a name that
// has it, and adds no second "_total", so it serves the same series,
// with the same help, as promexport. The one difference is the store
// latency: OpenTelemetry has no observable histogram, and the receiver
// keeps its latencies in buckets, so its sum and count are two counters,
// msgaudit_receiver_store_latency_seconds_sum (unit s) and
// msgaudit_receiver_store_latency_seconds_count, without the buckets.
// The Prometheus exporter appends "_total" to a counter's name, so they
// are scraped as msgaudit_receiver_store_latency_seconds_sum_total and
// msgaudit_receiver_store_latency_seconds_count_total (exactly _sum and
// _count with a translation strategy without suffixes, under which every
// other name is unchanged too). The mean latency is still their rates'
// ratio.
//
// The constant labels of promexport (transport, store) and the duplicates'
// reason are attributes. Where promexport leaves the connection audit's
// metrics out until a snapshot says Audited, these callbacks observe
// nothing for them.
//
// The package is a module of its own: the library's core packages import
// no OpenTelemetry module, and a program that does not export them links
// none. It depends on OpenTelemetry's metric API only; the program brings
// the SDK and an exporter.
package otelmetric
