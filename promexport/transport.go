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
	return &statsCollector{stats: stats, series: counters(metricnames.TransportCounters, transport)}
}

type statsCollector struct {
	stats  func() receiver.TransportStats
	series []series[receiver.TransportStats]
}

func (s *statsCollector) Describe(ch chan<- *prometheus.Desc) {
	describe(ch, s.series)
}

func (s *statsCollector) Collect(ch chan<- prometheus.Metric) {
	collect(ch, s.series, s.stats())
}
