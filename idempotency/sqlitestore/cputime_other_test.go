//go:build !unix

package sqlitestore_test

import "time"

// processCPU is unavailable here; benchmarks then omit cpu-ns/op.
func processCPU() (time.Duration, bool) { return 0, false }
