// Package logbuf is a log sink for tests: a buffer that a logger's
// goroutines write to while the test reads it.
package logbuf

import (
	"bytes"
	"strings"
	"sync"
)

// Buffer is a bytes.Buffer safe for concurrent writes and reads. Its zero
// value is empty and ready.
type Buffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

// Write appends p.
func (l *Buffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

// String returns everything written so far.
func (l *Buffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// Lines returns what was written so far as lines, without their line
// ends; a last line without one counts too.
func (l *Buffer) Lines() []string {
	s := strings.TrimSuffix(l.String(), "\n")
	if s == "" {
		return nil
	}
	return strings.Split(s, "\n")
}
