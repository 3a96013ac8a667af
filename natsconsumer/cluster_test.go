//go:build unix

package natsconsumer

import (
	"context"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/acemq/msgaudit/internal/testkit/storetestkit"
	"github.com/acemq/msgaudit/internal/testkit/testenv"
	"github.com/acemq/msgaudit/internal/testkit/testwait"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// natsCluster is the three-node JetStream cluster of scripts/services:
// its client URLs, the pid files of its servers (in the same order) and
// the command that starts whichever node is down.
type natsCluster struct {
	urls, pidfiles []string
	start          string
	names          []string // each node's server_name, in the same order
}

// clusterFromEnv reads the cluster from MSGAUDIT_NATS_CLUSTER_URL,
// _PIDFILES and _START, takes the exclusive lock of the tests that kill
// its nodes and learns each node's server name.
func clusterFromEnv(t *testing.T) *natsCluster {
	t.Helper()
	how := "the nats-cluster service of scripts/services"
	cl := &natsCluster{
		urls:     strings.Split(testenv.Getenv(t, "MSGAUDIT_NATS_CLUSTER_URL", how), ","),
		pidfiles: strings.Split(testenv.Getenv(t, "MSGAUDIT_NATS_CLUSTER_PIDFILES", how), ","),
		start:    testenv.Getenv(t, "MSGAUDIT_NATS_CLUSTER_START", how),
	}
	if len(cl.urls) != 3 || len(cl.pidfiles) != 3 {
		t.Fatalf("want three URLs and three pid files, got %q and %q", cl.urls, cl.pidfiles)
	}
	storetestkit.LockService(t, "nats-cluster", true)
	// A node an earlier run left down is started again first.
	cl.startNodes(t)
	for _, u := range cl.urls {
		nc, err := nats.Connect(u, nats.Timeout(10*time.Second), nats.NoReconnect())
		if err != nil {
			t.Fatalf("connect %s: %v", u, err)
		}
		cl.names = append(cl.names, nc.ConnectedServerName())
		nc.Close()
	}
	return cl
}

// startNodes runs the start command, which starts the nodes that are down
// and returns once every node reports JetStream healthy.
func (cl *natsCluster) startNodes(t *testing.T) {
	t.Helper()
	ctx := testwait.Context(t, 3*time.Minute)
	if out, err := exec.CommandContext(ctx, "sh", "-c", cl.start).CombinedOutput(); err != nil {
		t.Fatalf("%s: %v\n%s", cl.start, err, out)
	}
}

// kill sends SIGKILL to the server named name and returns its index.
func (cl *natsCluster) kill(t *testing.T, name string) int {
	t.Helper()
	for i, n := range cl.names {
		if n != name {
			continue
		}
		b, err := os.ReadFile(cl.pidfiles[i])
		if err != nil {
			t.Fatal(err)
		}
		pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
		if err != nil || pid <= 1 {
			t.Fatalf("pid file %s: %q", cl.pidfiles[i], b)
		}
		if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
			t.Fatalf("kill %s (pid %d): %v", name, pid, err)
		}
		return i
	}
	t.Fatalf("no node of the cluster is named %q (%q)", name, cl.names)
	return -1
}

// leaders returns the current leaders of e's stream and of its durable
// consumer ("" while there is none, or the cluster cannot say). Only the
// stream's leader answers its info requests, so the short timeout is the
// resolution of the takeover time measured with it; callers poll.
func (e *natsEnv) leaders() (stream, consumer string) {
	ctx, cancel := context.WithTimeout(context.Background(), 250*time.Millisecond)
	defer cancel()
	s, err := e.js.Stream(ctx, e.stream)
	if err != nil || s.CachedInfo().Cluster == nil {
		return "", ""
	}
	stream = s.CachedInfo().Cluster.Leader
	c, err := s.Consumer(ctx, e.consumer)
	if err == nil && c.CachedInfo().Cluster != nil {
		consumer = c.CachedInfo().Cluster.Leader
	}
	return stream, consumer
}

// replicasCurrent reports whether the stream has a leader and every other
// replica is online and current.
func (e *natsEnv) replicasCurrent() bool {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	s, err := e.js.Stream(ctx, e.stream)
	if err != nil {
		return false
	}
	ci := s.CachedInfo().Cluster
	if ci == nil || ci.Leader == "" || len(ci.Replicas) != 2 {
		return false
	}
	for _, r := range ci.Replicas {
		if r.Offline || !r.Current {
			return false
		}
	}
	return true
}

// publisher publishes "m<i>" with Nats-Msg-Id "m<i>" every 5ms until
// stopped, retrying a publish that fails (while the stream has no
// leader) with the same id, so that the stream's duplicate window keeps
// a retried message once.
type publisher struct {
	stop    chan struct{}
	done    chan struct{} // receives one value when the publisher ends
	once    sync.Once
	n       int  // messages published, read once done has received
	retries int  // publishes retried, read once done has received
	unsent  bool // the last message was never confirmed
}

// startPublisher starts a publisher to e's stream, stopped at the
// latest with the test.
func (e *natsEnv) startPublisher(t *testing.T) *publisher {
	p := &publisher{stop: make(chan struct{}), done: make(chan struct{}, 1)}
	go func() {
		defer func() { p.done <- struct{}{} }()
		tick := time.NewTicker(5 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-p.stop:
				return
			case <-tick.C:
			}
			m := nats.NewMsg(e.subject)
			m.Data = []byte("m" + strconv.Itoa(p.n))
			m.Header.Set(jetstream.MsgIDHeader, string(m.Data))
			var giveUp <-chan time.Time
			for {
				ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
				_, err := e.js.PublishMsg(ctx, m)
				cancel()
				if err == nil {
					break
				}
				p.retries++
				if giveUp == nil {
					select {
					case <-p.stop:
						// Stopped with this message unconfirmed: keep
						// trying for a while, so that n counts what the
						// stream holds.
						giveUp = time.After(30 * time.Second)
					default:
					}
				}
				select {
				case <-giveUp:
					p.unsent = true
					return
				case <-time.After(50 * time.Millisecond):
				}
			}
			p.n++
		}
	}()
	t.Cleanup(func() { p.halt(t) })
	return p
}

// halt stops the publisher (the first call does) and returns how many
// messages it published.
func (p *publisher) halt(t *testing.T) int {
	p.once.Do(func() {
		close(p.stop)
		if _, ok := testwait.Recv(t, p.done, 2*time.Minute, "the publisher's end"); !ok {
			return
		}
		if p.unsent {
			t.Errorf("publisher: message m%d was never confirmed", p.n)
		}
		t.Logf("publisher: %d messages, %d publishes retried", p.n, p.retries)
	})
	return p.n
}

// TestClusterLeaderKilled: on the three-node JetStream cluster of
// MSGAUDIT_NATS_CLUSTER_URL, a stream with 3 replicas (file storage)
// receives a message every 5ms (each with a Nats-Msg-Id; a publish that
// fails is retried), and a consumer connected to all three nodes, with
// the inbox on SQLite, applies them. Once 300 are applied the stream's
// leader (StreamInfo.Cluster.Leader) is killed with SIGKILL. Another node
// is elected, the consumer resumes on it, the killed node is started
// again and catches up; every published message is applied exactly once,
// the consumer ends drained and the stream holds every message. It logs
// the takeover time (kill to a new stream leader seen) and the resume
// time (kill to the first acknowledgement the consumer sends after that).
func TestClusterLeaderKilled(t *testing.T) {
	cl := clusterFromEnv(t)
	url := strings.Join(cl.urls, ",")
	e := newEnvOn(t, url, 0, 3)
	l := newLedger(t)
	pub := e.startPublisher(t)
	c := l.consumer(e, url)
	stop := start(t, c)
	testwait.Until(t, 2*time.Minute, "300 messages applied", func() bool {
		r, _ := l.applied()
		return r >= 300
	})
	var leader, consumerLeader string
	testwait.Until(t, time.Minute, "the stream's leader known", func() bool {
		leader, consumerLeader = e.leaders()
		return leader != ""
	})
	before, _ := l.applied()
	killed := time.Now()
	i := cl.kill(t, leader)
	t.Cleanup(func() { cl.startNodes(t) }) // whatever happens, leave the cluster whole
	t.Cleanup(func() {
		if t.Failed() {
			sl, cl := e.leaders()
			t.Logf("at the end: stream leader %q, consumer leader %q, consumer %+v", sl, cl, e.info())
		}
	})
	var newLeader, newConsumerLeader string
	testwait.Until(t, 2*time.Minute, "a new stream leader", func() bool {
		newLeader, newConsumerLeader = e.leaders()
		return newLeader != "" && newLeader != leader
	})
	takeover := time.Since(killed)
	acked := nextAck(t, c, 2*time.Minute, "an acknowledgement after the takeover")
	t.Logf("killed stream leader %s (consumer leader %s) at %d applied; new stream leader %s (consumer leader %s) %v after the kill; first acknowledgement after it %v after the kill",
		leader, consumerLeader, before, newLeader, newConsumerLeader, takeover.Round(time.Millisecond), acked.Sub(killed).Round(time.Millisecond))
	restarted := time.Now()
	cl.startNodes(t)
	t.Logf("%s (%s) started again in %v", cl.names[i], cl.urls[i], time.Since(restarted).Round(time.Millisecond))
	testwait.Until(t, 2*time.Minute, "the restarted node current again", e.replicasCurrent)
	total := pub.halt(t)
	testwait.Until(t, 3*time.Minute, "every message applied and the consumer drained", func() bool {
		r, _ := l.applied()
		return r == total && e.drained()
	})
	if err := stop(); err != nil {
		t.Errorf("Run: %v", err)
	}
	l.check(e, total)
	s, st := c.Metrics().Snapshot(), c.Stats()
	t.Logf("published %d; delivered %d processed %d duplicates %d retries %d lost %d reconnects %d ack errors %d",
		total, s.Delivered, s.Processed, s.Duplicates(), s.Retries, st.Lost, st.Reconnects, st.AckErrors)
}
