// Package storelat holds the upper bounds of the store latency histogram
// that receiver.Metrics keeps (Metrics.StoreBuckets) and the exporters
// and the inbox read.
package storelat

import "time"

// Bounds are the upper bounds of the store latency buckets: 100 µs,
// 250 µs, 500 µs, 1 ms, 2.5 ms, 5 ms, 10 ms, 25 ms, 50 ms, 100 ms, 250 ms
// and 1 s.
var Bounds = [...]time.Duration{
	100 * time.Microsecond, 250 * time.Microsecond, 500 * time.Microsecond,
	time.Millisecond, 2500 * time.Microsecond, 5 * time.Millisecond,
	10 * time.Millisecond, 25 * time.Millisecond, 50 * time.Millisecond,
	100 * time.Millisecond, 250 * time.Millisecond, time.Second,
}
