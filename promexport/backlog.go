package promexport

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/acemq/msgaudit/idempotency"
	"github.com/acemq/msgaudit/internal/metricnames"
)

// Sampling of Backlog's collectors: a sample is reused for backlogTTL and
// given up after backlogTimeout.
const (
	backlogTTL     = 10 * time.Second
	backlogTimeout = 2 * time.Second
)

// Backlog returns a prometheus.Collector exporting what sample returns
// (the Backlog method of a store or an inbox) as gauges named
// msgaudit_backlog_*, with the constant label store (e.g. "orders-inbox"):
//
//	reg.MustRegister(promexport.Backlog(store.Backlog, "orders"))
//
// The gauges are held, oldest_held_seconds, rows and oldest_row_seconds
// (see idempotency.Backlog). A scrape takes a new sample only when the
// last one is 10 s old or older; scrapes in between, and concurrent
// ones, reuse it, so the database sees at most one sample per collector
// every 10 s however often it is scraped. A sample is given up after
// 2 s. A failed one counts in msgaudit_backlog_sample_errors_total and
// leaves the gauges at the last good sample's values; none are exported
// before the first good sample. Several collectors with different store
// values may be registered in one registry.
func Backlog(sample func(context.Context) (idempotency.Backlog, error), store string) prometheus.Collector {
	return &backlogCollector{
		sample:  sample,
		ttl:     backlogTTL,
		timeout: backlogTimeout,
		now:     time.Now,
		gauges: slices.Concat(gauges(metricnames.BacklogGauges, store),
			secondsGauges(metricnames.BacklogSecondsGauges, store)),
		errors: newDesc(metricnames.BacklogSampleErrors, store),
	}
}

type backlogCollector struct {
	sample       func(context.Context) (idempotency.Backlog, error)
	ttl, timeout time.Duration
	now          func() time.Time

	gauges []series[idempotency.Backlog]
	errors *prometheus.Desc

	mu      sync.Mutex // held while sampling: concurrent scrapes wait and reuse
	sampled time.Time  // when the last sample, good or failed, was taken
	tried   bool
	good    bool // last holds a good sample
	last    idempotency.Backlog
	errs    uint64
}

func (c *backlogCollector) Describe(ch chan<- *prometheus.Desc) {
	describe(ch, c.gauges)
	ch <- c.errors
}

// current returns the cached sample, taking a new one first when the
// last is ttl old.
func (c *backlogCollector) current() (b idempotency.Backlog, good bool, errs uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if now := c.now(); !c.tried || now.Sub(c.sampled) >= c.ttl {
		ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
		got, err := c.sample(ctx)
		cancel()
		c.tried, c.sampled = true, now
		if err != nil {
			c.errs++
		} else {
			c.last, c.good = got, true
		}
	}
	return c.last, c.good, c.errs
}

func (c *backlogCollector) Collect(ch chan<- prometheus.Metric) {
	b, good, errs := c.current()
	ch <- prometheus.MustNewConstMetric(c.errors, prometheus.CounterValue, float64(errs))
	if good {
		collect(ch, c.gauges, b)
	}
}
