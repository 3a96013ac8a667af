package promexport

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/acemq/msgaudit/internal/metricnames"
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
	col := &statsCollector{stats: stats}
	add := func(m metricnames.Metric, read func(receiver.TransportStats) uint64) {
		col.descs = append(col.descs, statDesc{newDesc(m, transport), read})
	}
	type s = receiver.TransportStats
	add(metricnames.TransportConnects, func(s s) uint64 { return s.Connects })
	add(metricnames.TransportReconnects, func(s s) uint64 { return s.Reconnects })
	add(metricnames.TransportConnectErrors, func(s s) uint64 { return s.ConnectErrors })
	add(metricnames.TransportLost, func(s s) uint64 { return s.Lost })
	add(metricnames.TransportAcks, func(s s) uint64 { return s.Acks })
	add(metricnames.TransportRequeues, func(s s) uint64 { return s.Requeues })
	add(metricnames.TransportRetryCopies, func(s s) uint64 { return s.RetriesSent })
	add(metricnames.TransportLocalRetries, func(s s) uint64 { return s.LocalRetries })
	add(metricnames.TransportDeadLetterCopies, func(s s) uint64 { return s.DeadLetters })
	add(metricnames.TransportDeadLetterErrors, func(s s) uint64 { return s.DeadLetterErrors })
	add(metricnames.TransportOversized, func(s s) uint64 { return s.Oversized })
	add(metricnames.TransportDropped, func(s s) uint64 { return s.Dropped })
	add(metricnames.TransportStaleAcks, func(s s) uint64 { return s.StaleAcks })
	add(metricnames.TransportAckErrors, func(s s) uint64 { return s.AckErrors })
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
