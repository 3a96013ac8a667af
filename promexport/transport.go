package promexport

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/acemq/msgaudit/receiver"
)

// Transport returns a prometheus.Collector exporting the transport
// counters stats returns (usually the Stats method of a
// *stompconsumer.Consumer or a *rabbitconsumer.Consumer, read at every
// scrape) as counters named msgaudit_transport_*, with the constant label
// transport (e.g. "stomp", "amqp"), as Receiver labels the pipeline's:
//
//	reg.MustRegister(
//		promexport.Receiver(c.Metrics().Snapshot, "stomp"),
//		promexport.Transport(c.Stats, "stomp"),
//	)
//
// Every counter of receiver.TransportStats is exported; one a transport
// does not keep stays at zero (see receiver.TransportStats). Generation is
// not exported. Several collectors with different transport values may be
// registered in one registry.
func Transport(stats func() receiver.TransportStats, transport string) prometheus.Collector {
	labels := prometheus.Labels{"transport": transport}
	col := &statsCollector{stats: stats}
	add := func(name, help string, read func(receiver.TransportStats) uint64) {
		col.descs = append(col.descs, statDesc{prometheus.NewDesc("msgaudit_transport_"+name, help, nil, labels), read})
	}
	type s = receiver.TransportStats
	add("connects_total", "Successful broker connections.", func(s s) uint64 { return s.Connects })
	add("reconnects_total", "Connections made after a connection loss.", func(s s) uint64 { return s.Reconnects })
	add("connect_errors_total", "Failed connection attempts.", func(s s) uint64 { return s.ConnectErrors })
	add("lost_total", "Connections or channels that broke while consuming (RabbitMQ).", func(s s) uint64 { return s.Lost })
	add("acks_total", "Deliveries acknowledged (RabbitMQ).", func(s s) uint64 { return s.Acks })
	add("requeues_total", "Deliveries handed back to the broker for a retry (RabbitMQ).", func(s s) uint64 { return s.Requeues })
	add("retry_copies_total", "Retry copies committed with the original's ACK (STOMP).", func(s s) uint64 { return s.RetriesSent })
	add("local_retries_total", "Retries run in place (STOMP).", func(s s) uint64 { return s.LocalRetries })
	add("dead_letter_copies_total", "Dead-letter copies the broker took before the original was acknowledged.", func(s s) uint64 { return s.DeadLetters })
	add("dead_letter_errors_total", "Dead-letter publishes that failed; the original was handed back (RabbitMQ).", func(s s) uint64 { return s.DeadLetterErrors })
	add("oversized_total", "Deliveries over the size limits, dead-lettered unhandled.", func(s s) uint64 { return s.Oversized })
	add("dropped_total", "Deliveries dropped unprocessed with their connection (sent again by the broker).", func(s s) uint64 { return s.Dropped })
	add("stale_acks_total", "Acknowledgements not sent because the delivery's connection was gone.", func(s s) uint64 { return s.StaleAcks })
	add("ack_errors_total", "Acknowledgement failures.", func(s s) uint64 { return s.AckErrors })
	return col
}

type statDesc struct {
	desc *prometheus.Desc
	read func(receiver.TransportStats) uint64
}

type statsCollector struct {
	stats func() receiver.TransportStats
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
