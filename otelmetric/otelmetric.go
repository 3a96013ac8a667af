package otelmetric

import (
	"context"
	"errors"

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
	type counter struct {
		inst  metric.Int64ObservableCounter
		read  func(receiver.Snapshot) uint64
		audit bool // observed only when an audit reports to the Metrics
	}
	var counters []counter
	add := func(m metricnames.Metric, read func(receiver.Snapshot) uint64) {
		counters = append(counters, counter{inst: in.intCounter(m.Name, m.Help, m.Unit), read: read})
	}
	type s = receiver.Snapshot
	add(metricnames.ReceiverDelivered, func(s s) uint64 { return s.Delivered })
	add(metricnames.ReceiverRedelivered, func(s s) uint64 { return s.Redelivered })
	add(metricnames.ReceiverProcessed, func(s s) uint64 { return s.Processed })
	add(metricnames.ReceiverRetries, func(s s) uint64 { return s.Retries })
	add(metricnames.ReceiverDeadLettered, func(s s) uint64 { return s.DeadLettered })
	add(metricnames.ReceiverHandlerErrors, func(s s) uint64 { return s.HandlerErrors })
	add(metricnames.ReceiverPanics, func(s s) uint64 { return s.Panics })
	add(metricnames.ReceiverReconnects, func(s s) uint64 { return s.Reconnects })
	add(metricnames.ReceiverMissingKeys, func(s s) uint64 { return s.MissingKeys })
	add(metricnames.ReceiverTooOldFailOpen, func(s s) uint64 { return s.TooOldFailOpen })
	add(metricnames.ReceiverAuditBypass, func(s s) uint64 { return s.AuditBypass })
	add(metricnames.ReceiverStoreErrors, func(s s) uint64 { return s.StoreErrors })
	add(metricnames.ReceiverSettleErrors, func(s s) uint64 { return s.SettleErrors })
	add(metricnames.ReceiverForgotten, func(s s) uint64 { return s.Forgotten })
	auditFrom := len(counters)
	add(metricnames.ReceiverAuditEvictions, func(s s) uint64 { return s.Audit.Evictions })
	add(metricnames.ReceiverAuditRecentEvictions, func(s s) uint64 { return s.Audit.RecentEvictions })
	add(metricnames.ReceiverAuditDestinationEvictions, func(s s) uint64 { return s.Audit.AuditEvictions })
	add(metricnames.ReceiverAuditMalformed, func(s s) uint64 { return s.Audit.Malformed })
	add(metricnames.ReceiverAuditTooLong, func(s s) uint64 { return s.Audit.TooLong })
	add(metricnames.ReceiverAuditTooOld, func(s s) uint64 { return s.Audit.TooOld })
	for i := auditFrom; i < len(counters); i++ {
		counters[i].audit = true
	}
	type gauge struct {
		inst metric.Int64ObservableGauge
		read func(receiver.Snapshot) int
	}
	auditGauges := []gauge{
		{in.intGauge(metricnames.ReceiverAuditProducers), func(s s) int { return s.Audit.Producers }},
		{in.intGauge(metricnames.ReceiverAuditQueues), func(s s) int { return s.Audit.Queues }},
		{in.intGauge(metricnames.ReceiverAuditTopics), func(s s) int { return s.Audit.Topics }},
	}
	m := metricnames.ReceiverDuplicates
	dup := in.intCounter(m.Name, m.Help, m.Unit)
	m = metricnames.ReceiverStoreLatency
	latSum := in.floatCounter(m.Name+"_sum", "Sum of the latencies of idempotency store calls (the sum of the Prometheus histogram).", m.Unit)
	latCount := in.intCounter(m.Name+"_count", "Idempotency store calls (the count of the Prometheus histogram).", "{call}")
	inFlight := in.intGauge(metricnames.ReceiverInFlight)
	oldest := in.floatGauge(metricnames.ReceiverOldestInFlight)
	if in.err != nil {
		return nil, in.err
	}

	attrs := metric.WithAttributeSet(attribute.NewSet(attribute.String(metricnames.LabelTransport, transport)))
	reason := func(r string) metric.ObserveOption {
		return metric.WithAttributeSet(attribute.NewSet(attribute.String(metricnames.LabelTransport, transport),
			attribute.String(metricnames.LabelReason, r)))
	}
	dupAudit, dupStore, dupInFlight, dupOther := reason("audit"), reason("store"), reason("in-flight"), reason("other")
	return meter.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		s := snapshot()
		for _, c := range counters {
			if !c.audit || s.Audited {
				o.ObserveInt64(c.inst, toInt64(c.read(s)), attrs)
			}
		}
		if s.Audited {
			for _, g := range auditGauges {
				o.ObserveInt64(g.inst, int64(g.read(s)), attrs)
			}
		}
		o.ObserveInt64(inFlight, int64(s.InFlight), attrs)
		o.ObserveFloat64(oldest, s.OldestInFlight.Seconds(), attrs)
		o.ObserveInt64(dup, toInt64(s.DuplicatesAudit), dupAudit)
		o.ObserveInt64(dup, toInt64(s.DuplicatesStore), dupStore)
		o.ObserveInt64(dup, toInt64(s.DuplicatesInFlight), dupInFlight)
		o.ObserveInt64(dup, toInt64(s.DuplicatesOther), dupOther)
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
	type counter struct {
		inst metric.Int64ObservableCounter
		read func(receiver.TransportStats) uint64
	}
	var counters []counter
	add := func(m metricnames.Metric, read func(receiver.TransportStats) uint64) {
		counters = append(counters, counter{in.intCounter(m.Name, m.Help, m.Unit), read})
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
	if in.err != nil {
		return nil, in.err
	}
	attrs := metric.WithAttributeSet(attribute.NewSet(attribute.String(metricnames.LabelTransport, transport)))
	return meter.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		st := stats()
		for _, c := range counters {
			o.ObserveInt64(c.inst, toInt64(c.read(st)), attrs)
		}
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

// toInt64 converts a counter, saturating at the largest int64 (a counter
// that large is years of traffic away).
func toInt64(v uint64) int64 {
	if v > 1<<63-1 {
		return 1<<63 - 1
	}
	return int64(v)
}
