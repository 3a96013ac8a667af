package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"time"
)

// demoProcs runs the demo's consumer processes, one at a time: it starts
// one, kills it with SIGKILL or stops it gracefully, and sums the counters
// they report.
type demoProcs struct {
	exe    string // the msgaudit executable (in tests: the test binary)
	dir    string // the run's temp dir
	ctl    net.Listener
	stderr io.Writer
	base   demoChildConfig // every consumer's configuration
	// name names the processes in errors: "consumer" when empty (with
	// -chain: "consumer A", "relay", "consumer B").
	name string

	n    int        // consumers started
	cur  *demoProc  // the running one, or nil
	mu   sync.Mutex // guards done
	done demoStats  // the counters of the consumers that ended
}

// demoProc is one consumer process.
type demoProc struct {
	n          int
	cmd        *exec.Cmd
	ctrl       *wireConn
	exited     chan struct{} // closed when the process has exited; err is then set
	err        error
	readerDone chan struct{} // closed when its control connection is read to the end
	mu         sync.Mutex
	last       demoStats // its latest report
}

// what is the processes' name in errors.
func (p *demoProcs) what() string {
	if p.name == "" {
		return "consumer"
	}
	return p.name
}

// demoStopTimeout bounds a graceful stop: the running handlers finish and
// the audit is persisted.
const demoStopTimeout = 30 * time.Second

// start starts a consumer process, from the audit snapshot at snapshotIn
// when it is not empty, and waits until it has connected its control
// socket.
func (p *demoProcs) start(ctx context.Context, snapshotIn string) error {
	p.n++
	cfg := p.base
	cfg.SnapshotIn = snapshotIn
	cfg.SnapshotOut = filepath.Join(p.dir, "audit.snapshot")
	b, err := json.Marshal(cfg)
	if err != nil {
		return err
	}
	path := filepath.Join(p.dir, fmt.Sprintf("consumer-%d.json", p.n))
	if err := os.WriteFile(path, b, 0o600); err != nil {
		return err
	}
	// The child runs "msgaudit demo" with demoChildEnv pointing at its
	// configuration; runDemo (or, in tests, TestMain) sees it.
	cmd := exec.Command(p.exe, "demo")
	cmd.Env = append(os.Environ(), demoChildEnv+"="+path)
	cmd.Stderr = p.stderr
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start %s process: %w", p.what(), err)
	}
	proc := &demoProc{n: p.n, cmd: cmd, exited: make(chan struct{}), readerDone: make(chan struct{})}
	go func() { proc.err = cmd.Wait(); close(proc.exited) }()
	ctrl, err := acceptControl(ctx, p.ctl, proc.exited)
	if err != nil {
		_ = cmd.Process.Kill()
		<-proc.exited
		return fmt.Errorf("%s process %d: %w (%v)", p.what(), proc.n, err, proc.err)
	}
	proc.ctrl = ctrl
	go func() { defer close(proc.readerDone); readStats(ctrl, &proc.mu, &proc.last) }()
	p.cur = proc
	return nil
}

// exitedByItself returns an error when the running consumer has exited
// without being asked to.
func (p *demoProcs) exitedByItself() error {
	if p.cur == nil {
		return nil
	}
	select {
	case <-p.cur.exited:
		err := p.cur.err
		p.end()
		return fmt.Errorf("%s process %d exited by itself (%v); its error is above", p.what(), p.n, err)
	default:
		return nil
	}
}

// kill kills the running consumer with SIGKILL and waits for its exit. It
// returns an error when the consumer did not die of the signal (it had
// exited by itself before).
func (p *demoProcs) kill() error {
	if p.cur == nil {
		return nil
	}
	cur := p.cur
	_ = cur.cmd.Process.Kill()
	<-cur.exited
	p.end()
	if ws, ok := cur.cmd.ProcessState.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		return fmt.Errorf("%s process %d was to be killed with SIGKILL but ended with %v; its error is above", p.what(), cur.n, cur.cmd.ProcessState)
	}
	return nil
}

// stop asks the running consumer to stop gracefully and waits for it.
func (p *demoProcs) stop() error {
	if p.cur == nil {
		return nil
	}
	cur := p.cur
	if err := cur.ctrl.send(&wireFrame{Op: "stop"}); err != nil {
		_ = p.kill()
		return fmt.Errorf("stop %s process %d: %w", p.what(), cur.n, err)
	}
	select {
	case <-cur.exited:
	case <-time.After(demoStopTimeout):
		_ = p.kill()
		return fmt.Errorf("%s process %d did not stop within %v", p.what(), cur.n, demoStopTimeout)
	}
	p.end()
	if cur.err != nil {
		return fmt.Errorf("%s process %d: %v; its error is above", p.what(), cur.n, cur.err)
	}
	return nil
}

// end accounts for the exited consumer.
func (p *demoProcs) end() {
	cur := p.cur
	p.cur = nil
	cur.ctrl.Close()
	<-cur.readerDone
	cur.mu.Lock()
	last := cur.last
	cur.mu.Unlock()
	p.mu.Lock()
	p.done.add(last)
	p.mu.Unlock()
}

// totals returns the counters of every consumer so far.
func (p *demoProcs) totals() demoStats {
	p.mu.Lock()
	t := p.done
	p.mu.Unlock()
	if cur := p.cur; cur != nil {
		cur.mu.Lock()
		t.add(cur.last)
		cur.mu.Unlock()
	}
	return t
}

// shutdown kills a consumer still running (after a failed run).
func (p *demoProcs) shutdown() { _ = p.kill() }

// demoLockedWriter serializes writes to w (the consumers' stderr and the
// parent's).
type demoLockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (w *demoLockedWriter) Write(b []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.w.Write(b)
}
