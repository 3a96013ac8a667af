package promexport

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/acemq/msgaudit/stompconsumer"
)

// STOMP returns a prometheus.Collector exporting the STOMP transport
// counters stats returns (usually the Stats method of a
// *stompconsumer.Consumer, read at every scrape) as msgaudit_stomp_*
// counters. Register it next to Receiver(c.Metrics().Snapshot, "stomp"),
// which exports the pipeline's counters.
func STOMP(stats func() stompconsumer.Stats) prometheus.Collector {
	col := &statsCollector{stats: stats}
	add := func(name, help string, read func(stompconsumer.Stats) uint64) {
		col.descs = append(col.descs, statDesc{prometheus.NewDesc("msgaudit_stomp_"+name, help, nil, nil), read})
	}
	add("connects_total", "Successful broker connections.", func(s stompconsumer.Stats) uint64 { return s.Connects })
	add("reconnects_total", "Connections made after a connection loss.", func(s stompconsumer.Stats) uint64 { return s.Reconnects })
	add("connect_errors_total", "Failed connection attempts.", func(s stompconsumer.Stats) uint64 { return s.ConnectErrors })
	add("retry_copies_total", "Retry copies committed with the original's ACK.", func(s stompconsumer.Stats) uint64 { return s.RetriesSent })
	add("local_retries_total", "Retries run in place (topics).", func(s stompconsumer.Stats) uint64 { return s.LocalRetries })
	add("dead_letter_copies_total", "Dead-letter copies committed with the original's ACK.", func(s stompconsumer.Stats) uint64 { return s.DeadLettersSent })
	add("oversized_total", "Frames over the size limits, dead-lettered as records without their body (a persistent one NACKed as well, so the broker dead-letters it in full).", func(s stompconsumer.Stats) uint64 { return s.Oversized })
	add("dropped_total", "Deliveries dropped unprocessed with their connection (sent again by the broker).", func(s stompconsumer.Stats) uint64 { return s.Dropped })
	add("stale_acks_total", "Acknowledgements not sent because the delivery's connection was gone.", func(s stompconsumer.Stats) uint64 { return s.StaleAcks })
	add("ack_errors_total", "ACK or transaction failures (each ends the connection).", func(s stompconsumer.Stats) uint64 { return s.AckErrors })
	return col
}

type statDesc struct {
	desc *prometheus.Desc
	read func(stompconsumer.Stats) uint64
}

type statsCollector struct {
	stats func() stompconsumer.Stats
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
