//go:build unix

package pgrestart

import (
	"path/filepath"
	"testing"
	"time"
)

// TestLock: a second holder waits until the first releases the lock.
func TestLock(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ctl.lock")
	unlock, err := lock(path)
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan func(), 1)
	go func() {
		u, err := lock(path)
		if err != nil {
			t.Error(err)
			u = func() {}
		}
		got <- u
	}()
	select {
	case <-got:
		t.Fatal("the second holder got the lock while the first held it")
	case <-time.After(200 * time.Millisecond):
	}
	unlock()
	select {
	case u := <-got:
		u()
	case <-time.After(30 * time.Second):
		t.Fatal("the second holder never got the lock after its release")
	}
}
