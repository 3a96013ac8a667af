package promexport

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// SetBacklogTiming sets the cache duration, the timeout and the clock of
// a collector Backlog returned.
func SetBacklogTiming(c prometheus.Collector, ttl, timeout time.Duration, now func() time.Time) {
	b := c.(*backlogCollector)
	b.ttl, b.timeout = ttl, timeout
	if now != nil {
		b.now = now
	}
}
