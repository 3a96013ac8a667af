package sqlitestore

import (
	"math"
	"time"
)

// addNanos returns t+d in Unix nanoseconds, saturating instead of
// overflowing.
func addNanos(t int64, d time.Duration) int64 {
	if t > math.MaxInt64-int64(d) {
		return math.MaxInt64
	}
	return t + int64(d)
}
