//go:build unix

package failovertest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/acemq/msgaudit/internal/testkit/testenv"
	"github.com/go-stomp/stomp/v3"
)

// pair is the master/slave pair under test: its brokers' STOMP addresses,
// the pid files of their JVMs (in the same order) and the command that
// starts whichever of them is down.
type pair struct {
	addrs, pidfiles []string
	start           string
}

// pairFromEnv reads the pair from the environment; a missing variable
// skips the test (fails it when services are required).
func pairFromEnv(t testing.TB) *pair {
	t.Helper()
	how := "the activemq-pair service of scripts/services"
	p := &pair{
		addrs:    strings.Split(testenv.Getenv(t, "MSGAUDIT_STOMP_PAIR_ADDRS", how), ","),
		pidfiles: strings.Split(testenv.Getenv(t, "MSGAUDIT_STOMP_PAIR_PIDFILES", how), ","),
		start:    testenv.Getenv(t, "MSGAUDIT_STOMP_PAIR_START", how),
	}
	if len(p.addrs) != 2 || len(p.pidfiles) != 2 {
		t.Fatalf("failovertest: want two addresses and two pid files, got %q and %q", p.addrs, p.pidfiles)
	}
	for _, a := range p.addrs {
		host, _, err := net.SplitHostPort(a)
		if err != nil {
			t.Fatalf("failovertest: MSGAUDIT_STOMP_PAIR_ADDRS: %v", err)
		}
		if ip := net.ParseIP(host); host != "localhost" && (ip == nil || !ip.IsLoopback()) {
			t.Fatalf("failovertest: %s is not a loopback address: the test kills the brokers' processes", a)
		}
	}
	return p
}

// lockWait bounds the wait for another failover run on the same pair.
const lockWait = 8 * time.Minute

// lock makes this test the only one killing the pair's brokers until it
// ends: it takes an exclusive flock on a file beside the first broker's
// pid file, waiting while another process (a second go test, another
// checkout's scripts/test) holds it.
func (p *pair) lock(t testing.TB) {
	t.Helper()
	path := filepath.Join(filepath.Dir(p.pidfiles[0]), "failovertest.lock")
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		t.Fatalf("failovertest: %v", err)
	}
	t.Cleanup(func() { f.Close() }) // closing releases the lock
	deadline := time.Now().Add(lockWait)
	logged := false
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			return
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) {
			t.Fatalf("failovertest: lock %s: %v", path, err)
		}
		if time.Now().After(deadline) {
			t.Fatalf("failovertest: another failover run has held %s for %v", path, lockWait)
		}
		if !logged {
			t.Logf("waiting for another failover run on the pair (%s)", path)
			logged = true
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// dial opens a STOMP connection to broker i; only the master accepts one
// (the standby opens no connector until it holds the store's lock).
func (p *pair) dial(ctx context.Context, i int) (*stomp.Conn, error) {
	c, _, err := p.dialRaw(ctx, i)
	return c, err
}

// dialRaw is dial, also returning the connection's socket: closing it
// ends a go-stomp call that would otherwise wait for good (a frame queued
// as the connection broke is never answered, and a COMMIT's receipt wait
// has no timeout without heart-beats).
func (p *pair) dialRaw(ctx context.Context, i int) (*stomp.Conn, net.Conn, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	var d net.Dialer
	nc, err := d.DialContext(ctx, "tcp", p.addrs[i])
	if err != nil {
		return nil, nil, err
	}
	if dl, ok := ctx.Deadline(); ok {
		_ = nc.SetDeadline(dl)
	}
	c, err := stomp.Connect(nc, stomp.ConnOpt.AcceptVersion(stomp.V12), stomp.ConnOpt.HeartBeat(0, 0),
		stomp.ConnOpt.RcvReceiptTimeout(10*time.Second))
	if err != nil {
		nc.Close()
		return nil, nil, err
	}
	_ = nc.SetDeadline(time.Time{})
	return c, nc, nil
}

// master returns the index of the broker that accepts STOMP connections.
func (p *pair) master(ctx context.Context) (int, error) {
	var errs []error
	for i := range p.addrs {
		c, err := p.dial(ctx, i)
		if err == nil {
			_ = c.Disconnect()
			return i, nil
		}
		errs = append(errs, fmt.Errorf("%s: %w", p.addrs[i], err))
	}
	return -1, fmt.Errorf("failovertest: no broker of the pair accepts STOMP: %w", errors.Join(errs...))
}

// awaitMaster waits until broker i accepts STOMP connections and returns
// when it did.
func (p *pair) awaitMaster(ctx context.Context, i int, limit time.Duration) (time.Time, error) {
	deadline := time.Now().Add(limit)
	for {
		c, err := p.dial(ctx, i)
		if err == nil {
			at := time.Now()
			_ = c.Disconnect()
			return at, nil
		}
		if time.Now().After(deadline) {
			return time.Time{}, fmt.Errorf("failovertest: %s did not take over within %v: %w", p.addrs[i], limit, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// pid returns the pid of broker i's JVM, checking that the process runs
// and is an ActiveMQ broker.
func (p *pair) pid(i int) (int, error) {
	b, err := os.ReadFile(p.pidfiles[i])
	if err != nil {
		return 0, fmt.Errorf("failovertest: broker %s: %w", p.addrs[i], err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pid <= 1 {
		return 0, fmt.Errorf("failovertest: %s: no pid in %q", p.pidfiles[i], b)
	}
	cmd, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil {
		return 0, fmt.Errorf("failovertest: broker %s (pid %d) does not run: %w", p.addrs[i], pid, err)
	}
	if !bytes.Contains(cmd, []byte("activemq")) {
		return 0, fmt.Errorf("failovertest: pid %d of %s is not an ActiveMQ broker", pid, p.pidfiles[i])
	}
	return pid, nil
}

// kill sends SIGKILL to broker i's JVM and waits until it is gone.
func (p *pair) kill(i int) (time.Time, error) {
	pid, err := p.pid(i)
	if err != nil {
		return time.Time{}, err
	}
	at := time.Now()
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		return time.Time{}, fmt.Errorf("failovertest: kill -9 %d: %w", pid, err)
	}
	for deadline := time.Now().Add(15 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if !alive(pid) {
			return at, nil
		}
	}
	return time.Time{}, fmt.Errorf("failovertest: broker pid %d still alive 15s after SIGKILL", pid)
}

// alive reports whether pid runs (a zombie does not).
func alive(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	// The state follows the parenthesised command name.
	s := string(b)
	if j := strings.LastIndexByte(s, ')'); j >= 0 && j+2 < len(s) {
		return s[j+2] != 'Z' && s[j+2] != 'X'
	}
	return true
}

// up runs the pair's start command, which starts whichever broker is
// down and returns once it is master or waits on the store's lock.
func (p *pair) up(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "sh", "-c", p.start)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("failovertest: %s: %w\n%s", p.start, err, out.Bytes())
	}
	return nil
}
