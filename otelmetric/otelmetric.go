package otelmetric

import (
	"context"
	"errors"
	"slices"

	"github.com/acemq/msgaudit/internal/metricnames"
	"github.com/acemq/msgaudit/receiver"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// Receiver registers the receiver metrics (msgaudit_receiver_*) on meter,
// read from snapshot at every collection (usually the Snapshot method of a
// *receiver.Metrics), with the attribute transport (e.g. "stomp", "amqp").
// Several registrations with different transport values may share a
// meter. The connection audit's metrics are observed only once a snapshot
// says Audited. The store latency histogram is two counters, its sum and
// its count (see the package doc).
func Receiver(meter metric.Meter, snapshot func() receiver.Snapshot, transport string) (metric.Registration, error) {
	if meter == nil || snapshot == nil {
		return nil, errors.New("otelmetric: Receiver needs a meter and a snapshot function")
	}
	in := instruments{meter: meter}
	always := slices.Concat(counters(&in, metricnames.ReceiverCounters),
		gauges(&in, metricnames.ReceiverGauges), secondsGauges(&in, metricnames.ReceiverSecondsGauges))
	audit := slices.Concat(counters(&in, metricnames.ReceiverAuditCounters), gauges(&in, metricnames.ReceiverAuditGauges))
	m := metricnames.ReceiverDuplicates
	dup := in.intCounter(m.Name, m.Help, m.Unit)
	m = metricnames.ReceiverStoreLatency
	latSum := in.floatCounter(m.Name+"_sum", "Sum of the latencies of idempotency store calls (the sum of the Prometheus histogram).", m.Unit)
	latCount := in.intCounter(m.Name+"_count", "Idempotency store calls (the count of the Prometheus histogram).", "{call}")
	if in.err != nil {
		return nil, in.err
	}

	attrs := metric.WithAttributeSet(attribute.NewSet(attribute.String(metricnames.LabelTransport, transport)))
	reasons := make([]metric.ObserveOption, len(metricnames.ReceiverDuplicateReasons))
	for i, r := range metricnames.ReceiverDuplicateReasons {
		reasons[i] = metric.WithAttributeSet(attribute.NewSet(attribute.String(metricnames.LabelTransport, transport),
			attribute.String(metricnames.LabelReason, r.Value)))
	}
	return meter.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		s := snapshot()
		observe(o, always, s, attrs)
		if s.Audited {
			observe(o, audit, s, attrs)
		}
		for i, r := range metricnames.ReceiverDuplicateReasons {
			o.ObserveInt64(dup, toInt64(r.Read(s)), reasons[i])
		}
		o.ObserveFloat64(latSum, s.StoreLatency.Seconds(), attrs)
		o.ObserveInt64(latCount, toInt64(s.StoreCalls), attrs)
		return nil
	}, in.all...)
}

// Transport registers the transport metrics (msgaudit_transport_*) on
// meter, read from stats at every collection (usually the Stats method of
// a stompconsumer, rabbitconsumer or natsconsumer Consumer), with the
// attribute transport, as Receiver labels the pipeline's. Every counter of
// receiver.TransportStats is observed; one a transport does not keep stays
// at zero. Generation is not.
func Transport(meter metric.Meter, stats func() receiver.TransportStats, transport string) (metric.Registration, error) {
	if meter == nil || stats == nil {
		return nil, errors.New("otelmetric: Transport needs a meter and a stats function")
	}
	in := instruments{meter: meter}
	obs := counters(&in, metricnames.TransportCounters)
	if in.err != nil {
		return nil, in.err
	}
	attrs := metric.WithAttributeSet(attribute.NewSet(attribute.String(metricnames.LabelTransport, transport)))
	return meter.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		observe(o, obs, stats(), attrs)
		return nil
	}, in.all...)
}

// instruments creates observable instruments on a meter, keeping the
// first error and every instrument for RegisterCallback.
type instruments struct {
	meter metric.Meter
	err   error
	all   []metric.Observable
}

func (in *instruments) keep(o metric.Observable, err error) {
	in.err = errors.Join(in.err, err)
	in.all = append(in.all, o)
}

func (in *instruments) intCounter(name, help, unit string) metric.Int64ObservableCounter {
	c, err := in.meter.Int64ObservableCounter(name, metric.WithDescription(help), metric.WithUnit(unit))
	in.keep(c, err)
	return c
}

func (in *instruments) floatCounter(name, help, unit string) metric.Float64ObservableCounter {
	c, err := in.meter.Float64ObservableCounter(name, metric.WithDescription(help), metric.WithUnit(unit))
	in.keep(c, err)
	return c
}

func (in *instruments) intGauge(m metricnames.Metric) metric.Int64ObservableGauge {
	g, err := in.meter.Int64ObservableGauge(m.Name, metric.WithDescription(m.Help), metric.WithUnit(m.Unit))
	in.keep(g, err)
	return g
}

func (in *instruments) floatGauge(m metricnames.Metric) metric.Float64ObservableGauge {
	g, err := in.meter.Float64ObservableGauge(m.Name, metric.WithDescription(m.Help), metric.WithUnit(m.Unit))
	in.keep(g, err)
	return g
}

// observer observes one instrument, reading a T.
type observer[T any] func(o metric.Observer, t T, attrs metric.ObserveOption)

// observe runs every observer of obs on t.
func observe[T any](o metric.Observer, obs []observer[T], t T, attrs metric.ObserveOption) {
	for _, ob := range obs {
		ob(o, t, attrs)
	}
}

// each returns the observer newObserver makes of every entry of table.
func each[T, E any](table []E, newObserver func(E) observer[T]) []observer[T] {
	obs := make([]observer[T], len(table))
	for i, e := range table {
		obs[i] = newObserver(e)
	}
	return obs
}

// counters creates the instruments of a counter table and returns their
// observers.
func counters[T any](in *instruments, table []metricnames.CounterOf[T]) []observer[T] {
	return each(table, func(m metricnames.CounterOf[T]) observer[T] {
		c := in.intCounter(m.Name, m.Help, m.Unit)
		return func(o metric.Observer, t T, attrs metric.ObserveOption) {
			o.ObserveInt64(c, toInt64(m.Read(t)), attrs)
		}
	})
}

// gauges creates the int64 gauges of a gauge table and returns their
// observers.
func gauges[T any](in *instruments, table []metricnames.GaugeOf[T]) []observer[T] {
	return each(table, func(m metricnames.GaugeOf[T]) observer[T] {
		g := in.intGauge(m.Metric)
		return func(o metric.Observer, t T, attrs metric.ObserveOption) {
			o.ObserveInt64(g, m.Read(t), attrs)
		}
	})
}

// secondsGauges creates the float64 gauges of a table of gauges in
// seconds and returns their observers.
func secondsGauges[T any](in *instruments, table []metricnames.SecondsGaugeOf[T]) []observer[T] {
	return each(table, func(m metricnames.SecondsGaugeOf[T]) observer[T] {
		g := in.floatGauge(m.Metric)
		return func(o metric.Observer, t T, attrs metric.ObserveOption) {
			o.ObserveFloat64(g, m.Read(t).Seconds(), attrs)
		}
	})
}

// toInt64 converts a counter, saturating at the largest int64 (a counter
// that large is years of traffic away).
func toInt64(v uint64) int64 {
	if v > 1<<63-1 {
		return 1<<63 - 1
	}
	return int64(v)
}
