package otelmetric

import (
	"context"
	"errors"
	"slices"
	"sync"
	"time"

	"github.com/acemq/msgaudit/idempotency"
	"github.com/acemq/msgaudit/internal/metricnames"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// How often Backlog samples, and how long one sample may take.
const (
	sampleEvery   = 10 * time.Second
	sampleTimeout = 2 * time.Second
)

// Backlog registers the backlog metrics (msgaudit_backlog_*) on meter,
// read from sample (usually the Backlog method of a store or an inbox),
// with the attribute store (e.g. "pg", "orders-inbox").
//
// A sample is a statement or two on the database, so a collection reuses
// one younger than 10 s rather than take another, and each sample runs
// with a deadline of 2 s (or the collection's own, if sooner). A failed
// sample counts in msgaudit_backlog_sample_errors_total and leaves the
// gauges at the last good values; before a first good sample they report
// nothing. Collections that overlap a sample report the values it is
// about to replace rather than wait for it.
func Backlog(meter metric.Meter, sample func(context.Context) (idempotency.Backlog, error), store string) (metric.Registration, error) {
	return backlog(meter, sample, store, time.Now)
}

// backlog is Backlog with the clock the cache reads.
func backlog(meter metric.Meter, sample func(context.Context) (idempotency.Backlog, error), store string, now func() time.Time) (metric.Registration, error) {
	if meter == nil || sample == nil {
		return nil, errors.New("otelmetric: Backlog needs a meter and a sample function")
	}
	in := instruments{meter: meter}
	obs := slices.Concat(gauges(&in, metricnames.BacklogGauges), secondsGauges(&in, metricnames.BacklogSecondsGauges))
	m := metricnames.BacklogSampleErrors
	errs := in.intCounter(m.Name, m.Help, m.Unit)
	if in.err != nil {
		return nil, in.err
	}
	attrs := metric.WithAttributeSet(attribute.NewSet(attribute.String(metricnames.LabelStore, store)))
	s := &sampler{sample: sample, now: now}
	return meter.RegisterCallback(func(ctx context.Context, o metric.Observer) error {
		b, good, failed := s.read(ctx)
		if good {
			observe(o, obs, b, attrs)
		}
		o.ObserveInt64(errs, toInt64(failed), attrs)
		return nil
	}, in.all...)
}

// sampler caches a backlog sample. The lock guards its fields only: a
// sample runs outside it, one at a time.
type sampler struct {
	sample func(context.Context) (idempotency.Backlog, error)
	now    func() time.Time

	mu       sync.Mutex
	at       time.Time // when the last sample started
	sampling bool      // a sample is running
	tried    bool      // a sample has started
	last     idempotency.Backlog
	good     bool   // last holds a good sample
	failed   uint64 // failed samples
}

// read returns the last good sample (good false without one) and the
// number of failed samples, after taking a new sample when the last one
// started sampleEvery ago or more and none is running.
func (s *sampler) read(ctx context.Context) (b idempotency.Backlog, good bool, failed uint64) {
	s.mu.Lock()
	now := s.now()
	if s.sampling || (s.tried && now.Sub(s.at) < sampleEvery) {
		defer s.mu.Unlock()
		return s.last, s.good, s.failed
	}
	s.sampling, s.tried, s.at = true, true, now
	s.mu.Unlock()

	ctx, cancel := context.WithTimeout(ctx, sampleTimeout)
	b, err := s.sample(ctx)
	cancel()

	s.mu.Lock()
	defer s.mu.Unlock()
	s.sampling = false
	if err != nil {
		s.failed++
	} else {
		s.last, s.good = b, true
	}
	return s.last, s.good, s.failed
}
