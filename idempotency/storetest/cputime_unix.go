//go:build unix

package storetest

import "syscall"

// processCPU returns the CPU time (user + system, in nanoseconds) the
// process has used so far.
func processCPU() (int64, bool) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0, false
	}
	return ru.Utime.Nano() + ru.Stime.Nano(), true
}
