// Package promexport exports msgaudit's counters to Prometheus
// (github.com/prometheus/client_golang). The pipeline and the transports
// keep plain counters and snapshots (receiver.Metrics and its Snapshot,
// receiver.TransportStats from any consumer's Stats) and never import
// Prometheus;
// a program that wants the metrics on a scrape endpoint imports this
// package and registers the collectors:
//
//	reg.MustRegister(
//		promexport.Receiver(c.Metrics().Snapshot, "stomp"),
//		promexport.Transport(c.Stats, "stomp"),
//	)
//
// Every collector reads its snapshot function at scrape time, but for
// Backlog, which samples a store's or an inbox's database at most every
// 10 s.
package promexport
