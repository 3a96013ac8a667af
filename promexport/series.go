package promexport

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/acemq/msgaudit/internal/metricnames"
)

// series is one series a collector exports and how it reads a T, a
// snapshot of what the collector exports.
type series[T any] struct {
	desc *prometheus.Desc
	typ  prometheus.ValueType
	read func(T) float64
}

// counters returns the series of a counter table, with the constant label
// value.
func counters[T any](table []metricnames.CounterOf[T], value string) []series[T] {
	var ss []series[T]
	for _, m := range table {
		ss = append(ss, series[T]{newDesc(m.Metric, value), prometheus.CounterValue, func(t T) float64 { return float64(m.Read(t)) }})
	}
	return ss
}

// gauges returns the series of a gauge table, with the constant label
// value.
func gauges[T any](table []metricnames.GaugeOf[T], value string) []series[T] {
	var ss []series[T]
	for _, m := range table {
		ss = append(ss, series[T]{newDesc(m.Metric, value), prometheus.GaugeValue, func(t T) float64 { return float64(m.Read(t)) }})
	}
	return ss
}

// secondsGauges returns the series of a table of gauges in seconds, with
// the constant label value.
func secondsGauges[T any](table []metricnames.SecondsGaugeOf[T], value string) []series[T] {
	var ss []series[T]
	for _, m := range table {
		ss = append(ss, series[T]{newDesc(m.Metric, value), prometheus.GaugeValue, func(t T) float64 { return m.Read(t).Seconds() }})
	}
	return ss
}

// describe sends the Desc of every series of ss.
func describe[T any](ch chan<- *prometheus.Desc, ss []series[T]) {
	for _, s := range ss {
		ch <- s.desc
	}
}

// collect sends every series of ss, read from t.
func collect[T any](ch chan<- prometheus.Metric, ss []series[T], t T) {
	for _, s := range ss {
		ch <- prometheus.MustNewConstMetric(s.desc, s.typ, s.read(t))
	}
}

// newDesc returns the Desc of m: its first label is constant, set to
// value; the others vary.
func newDesc(m metricnames.Metric, value string) *prometheus.Desc {
	return prometheus.NewDesc(m.Name, m.Help, m.Labels[1:], prometheus.Labels{m.Labels[0]: value})
}
