package redisstore_test

import (
	"bufio"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/logging"

	"github.com/acemq/msgaudit/idempotency"
	"github.com/acemq/msgaudit/internal/testkit/storetestkit"
	"github.com/acemq/msgaudit/internal/testkit/testwait"
)

// clusterNode is one line of CLUSTER NODES.
type clusterNode struct {
	id, addr, flags, masterID, link string
	slots                           bool // serves slots
}

// clusterNodes reads CLUSTER NODES from the node at addr.
func clusterNodes(ctx context.Context, addr string) ([]clusterNode, error) {
	c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, DialTimeout: time.Second, ReadTimeout: 2 * time.Second})
	defer c.Close()
	text, err := c.ClusterNodes(ctx).Result()
	if err != nil {
		return nil, err
	}
	var nodes []clusterNode
	sc := bufio.NewScanner(strings.NewReader(text))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 8 {
			continue
		}
		addr, _, _ := strings.Cut(f[1], "@")
		nodes = append(nodes, clusterNode{id: f[0], addr: addr, flags: f[2], masterID: f[3], link: f[7], slots: len(f) > 8})
	}
	return nodes, sc.Err()
}

// clusterHealthy reports whether every node of the cluster answers, agrees
// the state is ok, and every one of the 3 masters has a connected replica.
// It returns why not.
func clusterHealthy(ctx context.Context, seeds []string) (bool, string) {
	var nodes []clusterNode
	var err error
	for _, a := range seeds {
		if nodes, err = clusterNodes(ctx, a); err == nil {
			break
		}
	}
	if err != nil {
		return false, "no seed answers CLUSTER NODES: " + err.Error()
	}
	masters, replicas := 0, 0
	for _, n := range nodes {
		if strings.Contains(n.flags, "fail") || n.link != "connected" {
			return false, fmt.Sprintf("node %s is %s/%s", n.addr, n.flags, n.link)
		}
		c := redis.NewClient(&redis.Options{Addr: n.addr, MaxRetries: -1, DialTimeout: time.Second})
		info, err := c.ClusterInfo(ctx).Result()
		_ = c.Close()
		if err != nil {
			return false, fmt.Sprintf("node %s: %v", n.addr, err)
		}
		if !strings.Contains(info, "cluster_state:ok") {
			return false, fmt.Sprintf("node %s: cluster state not ok", n.addr)
		}
		switch {
		case strings.Contains(n.flags, "master") && n.slots:
			masters++
		case strings.Contains(n.flags, "slave"):
			replicas++
		}
	}
	if masters != 3 || replicas != 3 {
		return false, fmt.Sprintf("%d masters with slots and %d replicas, want 3 and 3", masters, replicas)
	}
	return true, ""
}

// waitClusterHealthy polls clusterHealthy until it holds or d passes.
func waitClusterHealthy(ctx context.Context, seeds []string, d time.Duration) error {
	deadline := time.Now().Add(d)
	for {
		ok, why := clusterHealthy(ctx, seeds)
		if ok {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("cluster not healthy after %v: %s", d, why)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// serverInfo returns the fields of INFO server of the node at addr.
func serverInfo(ctx context.Context, addr string) (map[string]string, error) {
	c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, DialTimeout: time.Second})
	defer c.Close()
	text, err := c.Info(ctx, "server").Result()
	if err != nil {
		return nil, err
	}
	m := map[string]string{}
	for _, line := range strings.Split(text, "\r\n") {
		if k, v, ok := strings.Cut(line, ":"); ok {
			m[k] = v
		}
	}
	return m, nil
}

// keyState is what the failover test's model knows of one key from the
// answers it was given. Held and confirmed are acknowledged facts; the
// others follow an operation whose effect is unknown (in flight, or
// failed).
type keyState uint8

const (
	stFree       keyState = iota // never claimed, or a release acknowledged
	stHeld                       // a Claimed answer; no confirm or release sent
	stConfirming                 // held, a confirm sent (answer pending or failed): held or confirmed
	stConfirmed                  // a confirm acknowledged
	stMaybeFree                  // a release sent, or a try-claim failed: free, or held by a claim nobody knows
)

func (s keyState) String() string {
	return [...]string{"free", "held", "confirming", "confirmed", "maybe-free"}[s]
}

// modelEntry is one key: its state, the token of the last Claimed answer
// (only that holder's own transitions apply, so a holder that is slow to
// record its release cannot overwrite what the next holder did), and
// whether a confirm of the key was ever sent.
type modelEntry struct {
	st          keyState
	owner       string
	confirmSent bool
}

// failoverModel checks each answer against what was acknowledged before
// it. A Claimed answer is false when the key is held or confirmed; an
// AlreadyConfirmed answer is false when no confirm of the key was ever
// sent.
type failoverModel struct {
	mu         sync.Mutex
	st         map[string]*modelEntry
	violations []string
}

func (m *failoverModel) entry(id string) *modelEntry {
	e := m.st[id]
	if e == nil {
		e = &modelEntry{}
		m.st[id] = e
	}
	return e
}

// answered records the outcome of a successful try-claim of id; token is
// the claim's for Claimed.
func (m *failoverModel) answered(id string, out idempotency.Outcome, token string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	e := m.entry(id)
	switch out {
	case idempotency.Claimed:
		if e.st == stHeld || e.st == stConfirming || e.st == stConfirmed {
			m.violations = append(m.violations, fmt.Sprintf("%s: Claimed while the model has it %v", id, e.st))
		}
		e.st, e.owner = stHeld, token
	case idempotency.AlreadyConfirmed:
		if !e.confirmSent {
			m.violations = append(m.violations, fmt.Sprintf("%s: AlreadyConfirmed, but no confirm of it was ever sent (state %v)", id, e.st))
		}
	}
}

// tryFailed records a try-claim of id that returned an error: it may have
// claimed the key for a token nobody knows.
func (m *failoverModel) tryFailed(id string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if e := m.entry(id); e.st == stFree {
		e.st = stMaybeFree
	}
}

// set moves id to st, a transition of the holder of token; it is ignored
// once another claim of the key was answered.
func (m *failoverModel) set(id, token string, st keyState) {
	m.mu.Lock()
	defer m.mu.Unlock()
	e := m.entry(id)
	if st == stConfirming {
		e.confirmSent = true
	}
	if e.owner == token {
		e.st = st
	}
}

// TestClusterFailover kills one master of the test cluster with SIGKILL
// while 16 goroutines claim, confirm and release keys (half through the
// single-key calls, half through batches of 8), keeps the storm going
// until the cluster has promoted the master's replica and a little after,
// then restarts the killed node, which rejoins as a replica. Every answer
// is checked against a model of what was acknowledged before it: no key is
// Claimed while acknowledged as held or confirmed, no key is
// AlreadyConfirmed unless a confirm of it was sent. Operations may fail;
// the test reports how many did and how long the failover took. At the
// end it reports the acknowledged writes lost with the master, which
// asynchronous replication allows, and fails when they are over 1%.
func TestClusterFailover(t *testing.T) {
	clusterTestURL(t)
	storetestkit.LockService(t, clusterLock, true)
	admin := clusterAdmin(t)
	seeds := admin.Options().Addrs
	ctx := testwait.Context(t, 5*time.Minute)
	if err := waitClusterHealthy(ctx, seeds, time.Minute); err != nil {
		t.Fatalf("before the test: %v (scripts/services up redis-cluster repairs it)", err)
	}
	// Claims must not lapse during the test: a lapsed claim may be taken
	// over legitimately, which the model would count as a double claim.
	o := idempotency.Options{ClaimTTL: 10 * time.Minute, Retention: time.Hour}
	s, _ := openClusterStore(t, o, "dial_timeout=1s&read_timeout=2s&write_timeout=2s")

	// The victim: the master of the slot of a first key.
	nodes, err := clusterNodes(ctx, seeds[0])
	if err != nil {
		t.Fatal(err)
	}
	var victim clusterNode
	for _, n := range nodes {
		if strings.Contains(n.flags, "master") && n.slots {
			victim = n
			break
		}
	}
	info, err := serverInfo(ctx, victim.addr)
	if err != nil {
		t.Fatal(err)
	}
	pid, _ := strconv.Atoi(info["process_id"])
	exe, conf := info["executable"], info["config_file"]
	if _, err := os.Stat(exe); err != nil || !filepath.IsAbs(exe) {
		// A node started by a relative name reports it joined to its
		// working directory.
		exe = redisServerBinary(t)
	}
	if pid <= 0 || conf == "" {
		t.Fatalf("master %s: INFO server gives pid %q, executable %q, config_file %q; the test restarts the node from them",
			victim.addr, info["process_id"], exe, conf)
	}

	// go-redis logs every failed dial of the dead node; that is expected
	// here and would bury the test's own report.
	logging.Disable()
	t.Cleanup(logging.Enable) // go-redis's default logger again

	model := &failoverModel{st: map[string]*modelEntry{}}
	var (
		next                   atomic.Int64
		ops, errs, errsAfterOK atomic.Int64
		mixedBatches           atomic.Int64 // try-claim batches with both answers and errors
		stop                   = make(chan struct{})
		wg                     sync.WaitGroup
		firstErr               sync.Once
		firstErrText           string
	)
	var lastErrAt atomic.Int64 // unix nanoseconds of the latest error
	noteErr := func(err error) {
		errs.Add(1)
		lastErrAt.Store(time.Now().UnixNano())
		firstErr.Do(func() { firstErrText = err.Error() })
	}
	// pick returns a new key half of the time, else one already used.
	pick := func(r *rand.Rand) string {
		n := next.Load()
		if n == 0 || r.IntN(2) == 0 {
			return "k-" + strconv.FormatInt(next.Add(1), 10)
		}
		return "k-" + strconv.FormatInt(1+r.Int64N(n), 10)
	}
	key := func(id string) idempotency.Key { return idempotency.Key{Namespace: "failover", ID: id} }
	opCtx := func() (context.Context, context.CancelFunc) { return context.WithTimeout(ctx, 5*time.Second) }
	// settle confirms (4 in 5) or releases claims, updating the model
	// before sending and after the answer.
	settle := func(r *rand.Rand, ids []string, claims []idempotency.Claim) {
		var conf, rel []int
		for i := range ids {
			if r.IntN(5) < 4 {
				model.set(ids[i], claims[i].Token, stConfirming)
				conf = append(conf, i)
			} else {
				model.set(ids[i], claims[i].Token, stMaybeFree)
				rel = append(rel, i)
			}
		}
		run := func(idx []int, confirm bool) {
			if len(idx) == 0 {
				return
			}
			cs := make([]idempotency.Claim, len(idx))
			for n, i := range idx {
				cs[n] = claims[i]
			}
			es := make([]error, len(cs))
			c, cancel := opCtx()
			var err error
			switch {
			case len(cs) == 1 && confirm:
				es[0] = s.Confirm(c, cs[0])
			case len(cs) == 1:
				es[0] = s.Release(c, cs[0])
			case confirm:
				err = s.ConfirmBatch(c, cs, es)
			default:
				err = s.ReleaseBatch(c, cs, es)
			}
			cancel()
			for n, i := range idx {
				ops.Add(1)
				e := es[n]
				if err != nil {
					e = err
				}
				switch {
				case e == nil && confirm:
					model.set(ids[i], claims[i].Token, stConfirmed)
				case e == nil:
					model.set(ids[i], claims[i].Token, stFree)
				default:
					noteErr(e) // the state stays confirming / maybe-free
				}
			}
		}
		run(conf, true)
		run(rel, false)
	}
	for g := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(g), uint64(time.Now().UnixNano())))
			size := 1
			if g%2 == 1 {
				size = 8
			}
			for {
				select {
				case <-stop:
					return
				default:
				}
				ids := make([]string, size)
				keys := make([]idempotency.Key, size)
				for i := range ids {
					ids[i] = pick(r)
					keys[i] = key(ids[i])
				}
				res := make([]idempotency.ClaimResult, size)
				c, cancel := opCtx()
				var err error
				if size == 1 {
					res[0].Outcome, res[0].Claim, res[0].Err = s.TryClaim(c, keys[0])
				} else {
					err = s.TryClaimBatch(c, keys, res)
				}
				cancel()
				var held []string
				var claims []idempotency.Claim
				failedKeys := 0
				for i := range ids {
					if err != nil || res[i].Err != nil {
						failedKeys++
					}
				}
				if failedKeys > 0 && failedKeys < size {
					mixedBatches.Add(1)
				}
				for i := range ids {
					ops.Add(1)
					e := res[i].Err
					if err != nil {
						e = err
					}
					if e != nil {
						noteErr(e)
						model.tryFailed(ids[i])
						continue
					}
					model.answered(ids[i], res[i].Outcome, res[i].Claim.Token)
					if res[i].Outcome == idempotency.Claimed {
						held = append(held, ids[i])
						claims = append(claims, res[i].Claim)
					}
				}
				settle(r, held, claims)
			}
		}()
	}
	stopStorm := sync.OnceFunc(func() { close(stop); testwait.Group(t, &wg, 2*time.Minute, "the storm's goroutines") })
	t.Cleanup(stopStorm)

	time.Sleep(2 * time.Second) // the storm runs before the kill
	opsBefore, errsBefore := ops.Load(), errs.Load()
	killed := time.Now()
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatalf("SIGKILL master %s (pid %d): %v", victim.addr, pid, err)
	}
	t.Logf("SIGKILL master %s (pid %d) after %d operations", victim.addr, pid, opsBefore)
	restarted := false
	restart := func() {
		if restarted {
			return
		}
		restarted = true
		out, err := exec.Command(exe, conf).CombinedOutput()
		if err != nil {
			t.Errorf("restart %s: %s %s: %v\n%s", victim.addr, exe, conf, err, out)
		}
	}
	t.Cleanup(func() {
		restart()
		if err := waitClusterHealthy(context.Background(), seeds, 2*time.Minute); err != nil {
			t.Errorf("after restarting %s: %v", victim.addr, err)
		}
	})

	// The failover is over when a surviving node reports the cluster ok
	// with one of the victim's replicas serving slots as a master.
	var failover time.Duration
	survivor := ""
	for _, n := range nodes {
		if n.addr != victim.addr {
			survivor = n.addr
			break
		}
	}
	for failover == 0 {
		if time.Since(killed) > 2*time.Minute {
			t.Fatalf("no failover of %s within 2m", victim.addr)
		}
		time.Sleep(50 * time.Millisecond)
		now, err := clusterNodes(ctx, survivor)
		if err != nil {
			continue
		}
		for _, n := range now {
			if n.addr != victim.addr && strings.Contains(n.flags, "master") && n.slots {
				for _, old := range nodes {
					if old.addr == n.addr && old.masterID == victim.id {
						c := redis.NewClient(&redis.Options{Addr: survivor, MaxRetries: -1})
						st, err := c.ClusterInfo(ctx).Result()
						_ = c.Close()
						if err == nil && strings.Contains(st, "cluster_state:ok") {
							failover = time.Since(killed)
						}
					}
				}
			}
		}
	}
	// First op answered without error after the failover: the client
	// followed it. Let the storm run on for 3s.
	errsAtFailover := errs.Load()
	time.Sleep(3 * time.Second)
	errsAfterOK.Store(errs.Load() - errsAtFailover)
	stopStorm()
	total := ops.Load()
	t.Logf("failover of %s took %v (kill until a replica serves its slots and the cluster is ok)", victim.addr, failover.Round(time.Millisecond))
	t.Logf("operations: %d in all, %d errored (%d before the kill, %d from the kill until the failover, %d in the 3s after it); first error: %s",
		total, errs.Load(), errsBefore, errsAtFailover-errsBefore, errsAfterOK.Load(), firstErrText)
	t.Logf("%d try-claim batches were answered in part (some keys claimed or refused, others an error)", mixedBatches.Load())
	if at := lastErrAt.Load(); at != 0 {
		t.Logf("the last error came %v after the kill", time.Unix(0, at).Sub(killed).Round(time.Millisecond))
	}

	restart()
	if err := waitClusterHealthy(ctx, seeds, 2*time.Minute); err != nil {
		t.Fatalf("after restarting %s: %v", victim.addr, err)
	}
	t.Logf("the killed node rejoined as a replica; cluster healthy %v after the kill", time.Since(killed).Round(time.Millisecond))

	model.mu.Lock()
	defer model.mu.Unlock()
	for _, v := range model.violations {
		t.Errorf("false verdict: %s", v)
	}
	// Every acknowledged confirmation survived; every acknowledged claim
	// still holds its key.
	var confirmed, held, lost int
	for id, e := range model.st {
		var want idempotency.Outcome
		switch e.st {
		case stConfirmed:
			want, confirmed = idempotency.AlreadyConfirmed, confirmed+1
		case stHeld:
			want, held = idempotency.InProgress, held+1
		default:
			continue
		}
		// The client may still route to the dead node for a moment, or
		// hold its dial error: errors are retried, only verdicts count.
		var out idempotency.Outcome
		for try := 0; ; try++ {
			out, _, err = s.TryClaim(ctx, key(id))
			if err == nil {
				break
			}
			if try == 100 {
				t.Fatalf("TryClaim(%s) after the failover: %v", id, err)
			}
			time.Sleep(100 * time.Millisecond)
		}
		if out != want {
			lost++
			t.Logf("%s: acknowledged as %v, now %v", id, e.st, out)
		}
	}
	t.Logf("checked afterwards: %d acknowledged confirmations, %d acknowledged claims; %d lost", confirmed, held, lost)
	// Redis replicates asynchronously: the writes the master acknowledged
	// in its last moments can die with it (the guarantees table says so).
	// More than a sliver of them lost would be something else.
	if acked := confirmed + held; lost*100 > acked {
		t.Errorf("%d of %d acknowledged writes lost, over 1%%: more than replication lag explains", lost, acked)
	}
	if total-errs.Load() < 1000 {
		t.Errorf("only %d operations answered: the storm did not exercise the store", total-errs.Load())
	}
}
