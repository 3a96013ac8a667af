//go:build unix

package failovertest

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"runtime/pprof"
	"slices"
	"strings"
	"syscall"
	"time"
)

// stacks returns the goroutine stacks that run msgaudit's or go-stomp's
// code, identical stacks counted once, for a report on a stall.
func stacks() string {
	var buf bytes.Buffer
	if err := pprof.Lookup("goroutine").WriteTo(&buf, 1); err != nil {
		return fmt.Sprintf("goroutines: %v\n", err)
	}
	var b strings.Builder
	b.WriteString("goroutines in msgaudit or go-stomp code (count @ addresses, then the stack):\n")
	for _, block := range strings.Split(buf.String(), "\n\n") {
		if strings.Contains(block, "acemq/msgaudit") || strings.Contains(block, "go-stomp") {
			b.WriteString(block)
			b.WriteString("\n\n")
		}
	}
	return b.String()
}

// logTail returns the last n lines of the file at path, or why it cannot.
func logTail(path string, n int) string {
	data, err := os.ReadFile(path)
	if err != nil {
		return fmt.Sprintf("%s: %v\n", path, err)
	}
	lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	return fmt.Sprintf("last %d lines of %s:\n%s\n", min(n, len(lines)), path, strings.Join(lines[max(0, len(lines)-n):], "\n"))
}

// brokerThreads asks each running broker's JVM for a thread dump (SIGQUIT
// prints one to its stdout, the broker's console.log) and returns its busy
// transport threads, its blocked threads and any deadlock the JVM found:
// a broker that stopped reading a connection shows where it waits.
func brokerThreads(p *pair) string {
	var b strings.Builder
	for i, pf := range p.pidfiles {
		pid, err := p.pid(i)
		if err != nil {
			fmt.Fprintf(&b, "broker %s: %v\n", p.addrs[i], err)
			continue
		}
		console := filepath.Join(filepath.Dir(filepath.Dir(pf)), "log", "console.log")
		st, err := os.Stat(console)
		if err != nil {
			fmt.Fprintf(&b, "broker %s: %v\n", p.addrs[i], err)
			continue
		}
		if err := syscall.Kill(pid, syscall.SIGQUIT); err != nil {
			fmt.Fprintf(&b, "broker %s: SIGQUIT: %v\n", p.addrs[i], err)
			continue
		}
		dump := readDump(console, st.Size())
		fmt.Fprintf(&b, "broker %s (pid %d), busy transport threads and blocked threads, from its thread dump:\n%s\n", p.addrs[i], pid, stompThreads(dump))
	}
	return b.String()
}

// readDump returns what the JVM appended to path after offset, waiting up
// to 5 s for its thread dump to end.
func readDump(path string, offset int64) string {
	deadline := time.Now().Add(5 * time.Second)
	for {
		data, err := os.ReadFile(path)
		if err != nil {
			return err.Error()
		}
		if offset > int64(len(data)) {
			offset = 0 // the log was replaced
		}
		dump := string(data[offset:])
		if strings.Contains(dump, "JNI global refs") || time.Now().After(deadline) {
			return dump
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// stompThreads keeps, from a JVM thread dump, the blocks of the transport
// threads that are not idle (reading a socket, accepting, polling for
// work), of every BLOCKED thread and any deadlock report, each cut to its
// first 24 lines.
func stompThreads(dump string) string {
	var b strings.Builder
	idle := []string{"SocketDispatcher.read0", "timedAccept", "LinkedBlockingQueue.poll"}
	for _, block := range strings.Split(dump, "\n\n") {
		block = strings.TrimLeft(block, "\n")
		first, _, _ := strings.Cut(block, "\n")
		keep := strings.Contains(block, "State: BLOCKED") || strings.Contains(first, "deadlock") ||
			(strings.Contains(first, "Transport") && !slices.ContainsFunc(idle, func(s string) bool { return strings.Contains(block, s) }))
		if !keep {
			continue
		}
		lines := strings.Split(block, "\n")
		b.WriteString(strings.Join(lines[:min(len(lines), 24)], "\n"))
		b.WriteString("\n")
	}
	if b.Len() == 0 {
		return "(none: every transport thread idle, nothing blocked)\n"
	}
	return b.String()
}
