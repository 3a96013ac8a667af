//go:build unix

package storetestkit

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// LockService takes a lock on the shared test service name, across test
// processes (go test runs packages in parallel), and releases it at the
// test's cleanup: exclusive for a test that disrupts the service (kills a
// node), shared for tests that need it undisturbed. The lock is an flock
// on a file in the system's temporary directory, so it ends with the
// process even when the test does not finish.
func LockService(t testing.TB, name string, exclusive bool) {
	t.Helper()
	path := filepath.Join(os.TempDir(), "msgaudit-test-"+name+".lock")
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o666)
	if err != nil {
		t.Fatalf("lock %s: %v", path, err)
	}
	how := syscall.LOCK_SH
	if exclusive {
		how = syscall.LOCK_EX
	}
	if err := syscall.Flock(int(f.Fd()), how); err != nil {
		_ = f.Close()
		t.Fatalf("lock %s: %v", path, err)
	}
	t.Cleanup(func() { _ = f.Close() }) // closing the file releases the lock
}
