//go:build !unix

package e2e

import "time"

// cpuTime is not available here: CPU per message is reported as 0.
func cpuTime() (time.Duration, bool) { return 0, false }
