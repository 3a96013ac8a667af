//go:build !unix

package storetestkit

import "testing"

// LockService is a no-op where flock is missing: the tests that disrupt a
// shared service run only on Linux.
func LockService(t testing.TB, name string, exclusive bool) {}
