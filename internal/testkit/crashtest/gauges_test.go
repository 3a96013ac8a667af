//go:build unix

package crashtest

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"
)

// TestGaugesShared: two mappings of one gauge file (the child's and the
// parent's) see each other's updates, and reset zeroes them.
func TestGaugesShared(t *testing.T) {
	path := filepath.Join(t.TempDir(), "gauges")
	parent, err := openGauges(path, true)
	if err != nil {
		t.Fatal(err)
	}
	defer parent.close()
	child, err := openGauges(path, false)
	if err != nil {
		t.Fatal(err)
	}
	defer child.close()
	child.add(gaugeEffect, 3)
	child.add(gaugeEffect, -1)
	child.add(gaugeCalls, 7)
	if got := parent.load(gaugeEffect); got != 2 {
		t.Errorf("effect gauge seen by the other mapping = %d, want 2", got)
	}
	if got := parent.load(gaugeCalls); got != 7 {
		t.Errorf("calls gauge seen by the other mapping = %d, want 7", got)
	}
	if got := parent.load(gaugeSettled); got != 0 {
		t.Errorf("untouched settled gauge = %d, want 0", got)
	}
	parent.reset()
	for i := range gaugeSlots {
		if got := child.load(i); got != 0 {
			t.Errorf("slot %d after reset = %d, want 0", i, got)
		}
	}
}

// TestAwaitStopped: a running process is not reported stopped; after
// SIGSTOP it is, within the deadline.
func TestAwaitStopped(t *testing.T) {
	if _, err := os.Stat("/proc/self/task"); err != nil {
		t.Skip("no /proc: awaitStopped only waits a moment here")
	}
	sleep, err := exec.LookPath("sleep")
	if err != nil {
		t.Skip("no sleep binary to stop")
	}
	cmd := exec.Command(sleep, "60")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	}()
	tasks := "/proc/" + strconv.Itoa(cmd.Process.Pid) + "/task"
	if stopped, err := allStopped(tasks); err != nil || stopped {
		t.Fatalf("a running process: allStopped = %v, %v; want false, nil", stopped, err)
	}
	if err := syscall.Kill(cmd.Process.Pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	if err := awaitStopped(cmd.Process.Pid, 10*time.Second); err != nil {
		t.Fatalf("after SIGSTOP: %v", err)
	}
}
