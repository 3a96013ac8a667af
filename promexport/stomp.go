package promexport

import (
	"github.com/prometheus/client_golang/prometheus"
)

// STOMPStats is the shape of the STOMP transport counters STOMP exports:
// the fields of stompconsumer.Stats, in the same order. It is an alias of
// an unnamed struct type, so STOMP accepts the Stats method of a
// *stompconsumer.Consumer as it is, while this package imports no
// transport (a program that exports only the pipeline or the RabbitMQ
// transport does not link the STOMP client). If the two ever differ, the
// call no longer compiles instead of exporting wrong counters.
type STOMPStats = struct {
	// Connects counts successful connections (the first one included);
	// Reconnects those after a connection loss; ConnectErrors failed
	// attempts.
	Connects, Reconnects, ConnectErrors uint64
	// RetriesSent counts retry copies committed with the original's ACK;
	// LocalRetries counts retries run in place (topics).
	RetriesSent, LocalRetries uint64
	// DeadLettersSent counts dead-letter copies committed with the
	// original's ACK.
	DeadLettersSent uint64
	// Oversized counts frames over the size limits.
	Oversized uint64
	// Dropped counts received deliveries never processed because their
	// connection was lost or the consumer stopped.
	Dropped uint64
	// StaleAcks counts acknowledgements not sent because the delivery's
	// connection had been lost.
	StaleAcks uint64
	// AckErrors counts ACK/transaction failures.
	AckErrors uint64
	// Generation is the number of the current (or last) connection; it is
	// not exported.
	Generation uint64
}

// STOMP returns a prometheus.Collector exporting the STOMP transport
// counters stats returns (usually the Stats method of a
// *stompconsumer.Consumer, read at every scrape) as msgaudit_stomp_*
// counters: promexport.STOMP(c.Stats). Register it next to
// Receiver(c.Metrics().Snapshot, "stomp"), which exports the pipeline's
// counters.
func STOMP[S ~STOMPStats](stats func() S) prometheus.Collector {
	col := &statsCollector{stats: func() STOMPStats { return STOMPStats(stats()) }}
	add := func(name, help string, read func(STOMPStats) uint64) {
		col.descs = append(col.descs, statDesc{prometheus.NewDesc("msgaudit_stomp_"+name, help, nil, nil), read})
	}
	add("connects_total", "Successful broker connections.", func(s STOMPStats) uint64 { return s.Connects })
	add("reconnects_total", "Connections made after a connection loss.", func(s STOMPStats) uint64 { return s.Reconnects })
	add("connect_errors_total", "Failed connection attempts.", func(s STOMPStats) uint64 { return s.ConnectErrors })
	add("retry_copies_total", "Retry copies committed with the original's ACK.", func(s STOMPStats) uint64 { return s.RetriesSent })
	add("local_retries_total", "Retries run in place (topics).", func(s STOMPStats) uint64 { return s.LocalRetries })
	add("dead_letter_copies_total", "Dead-letter copies committed with the original's ACK.", func(s STOMPStats) uint64 { return s.DeadLettersSent })
	add("oversized_total", "Frames over the size limits, dead-lettered as records without their body (a persistent one NACKed as well, so the broker dead-letters it in full).", func(s STOMPStats) uint64 { return s.Oversized })
	add("dropped_total", "Deliveries dropped unprocessed with their connection (sent again by the broker).", func(s STOMPStats) uint64 { return s.Dropped })
	add("stale_acks_total", "Acknowledgements not sent because the delivery's connection was gone.", func(s STOMPStats) uint64 { return s.StaleAcks })
	add("ack_errors_total", "ACK or transaction failures (each ends the connection).", func(s STOMPStats) uint64 { return s.AckErrors })
	return col
}

type statDesc struct {
	desc *prometheus.Desc
	read func(STOMPStats) uint64
}

type statsCollector struct {
	stats func() STOMPStats
	descs []statDesc
}

func (s *statsCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range s.descs {
		ch <- d.desc
	}
}

func (s *statsCollector) Collect(ch chan<- prometheus.Metric) {
	st := s.stats()
	for _, d := range s.descs {
		ch <- prometheus.MustNewConstMetric(d.desc, prometheus.CounterValue, float64(d.read(st)))
	}
}
