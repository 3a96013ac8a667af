package main

// The -chain demo: producers → queue A → consumer A (inbox + outbox in its
// SQLite ledger) → relay → queue B → consumer B (inbox keyed by the outbox
// id) → B's ledger, on the broker model, with A, the relay and B killed
// with SIGKILL in turn.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/acemq/msgaudit/cmd/msgaudit/internal/brokermodel"
	"github.com/acemq/msgaudit/inbox"
	"github.com/acemq/msgaudit/outbox"
	"github.com/schollz/progressbar/v3"
)

// chainReport is the outcome of a -chain run.
type chainReport struct {
	sent                   uint64
	appliedA, appliedB     int64
	relayed, resent        uint64
	stA, stB               demoStats
	deliveries, redelivs   uint64
	cuts, replayed         uint64
	kills                  map[string]uint64 // by role
	restarts               uint64
	dlqDepth, leftOnBroker int
	check                  chainCheck
	elapsed                time.Duration
	timedOut               bool
}

// chainCheck is what the checker found; each count must be 0.
type chainCheck struct {
	lost, twiceA, twiceB, ghosts, order int64
}

// chainMsg is a message of the chain as a ledger records it: its demo
// key, its order key and its number among that key's messages in A's
// commit order.
type chainMsg struct {
	key, orderKey string
	seq           int64
}

// checkChain compares the ends of the chain. sent are the producers' demo
// keys; sentByA the messages A committed, by demo key; appliedB the
// messages B applied, in B's commit order (a message applied twice
// appears twice); deadLettered the demo keys in the dead-letter queue.
// Lost: sent, neither applied by B nor dead-lettered. Ghosts: applied by
// B but not committed by A as B has it (no such key, or another order key
// or number). Order violations: a message B applied first after one of
// its key with a higher or equal number. Applied twice is counted from
// the ledgers.
func checkChain(sent []string, sentByA map[string]chainMsg, appliedB []chainMsg, deadLettered map[string]bool) (lost, ghosts, order int64) {
	inB := map[string]bool{}
	last := map[string]int64{}
	for _, m := range appliedB {
		if inB[m.key] {
			continue // applied twice: counted by the ledger, ordered by its first application
		}
		inB[m.key] = true
		if a, ok := sentByA[m.key]; !ok || a != m {
			ghosts++
		}
		if m.seq <= last[m.orderKey] {
			order++
		} else {
			last[m.orderKey] = m.seq
		}
	}
	for _, k := range sent {
		if !inB[k] && !deadLettered[k] {
			lost++
		}
	}
	return lost, ghosts, order
}

// exitCode is 1 when a message was lost, applied twice, a ghost or out of
// order, or the run timed out; else 0.
func (r chainReport) exitCode() int {
	c := r.check
	if r.timedOut || c.lost+c.twiceA+c.twiceB+c.ghosts+c.order > 0 {
		return 1
	}
	return 0
}

func (r chainReport) print(w io.Writer) {
	fmt.Fprintf(w, "msgaudit demo -chain on the in-process broker MODEL (not a real broker)\n"+
		"chain: producers → queue A → consumer A (inbox + outbox in its SQLite ledger) → relay → queue B → consumer B (inbox keyed by the outbox id)\n")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	row := func(k string, v any, note string) {
		fmt.Fprintf(tw, "  %s\t%v\t%s\n", k, v, note)
	}
	a, b, c := r.stA, r.stB, r.check
	row("sent", r.sent, "by the producers to queue A")
	row("applied by A", r.appliedA, "A's ledger rows, each with its message to queue B in the same transaction")
	row("relayed", r.relayed, fmt.Sprintf("stored on queue B by the relay, %d of them resends under the same outbox id", r.resent))
	row("applied by B", r.appliedB, "B's ledger rows")
	row("delivered", r.deliveries, fmt.Sprintf("to A and B, %d with the redelivered flag", r.redelivs))
	row("duplicates absorbed", a.DupAudit+a.DupStore+a.DupInFlight+a.DupOther+b.DupAudit+b.DupStore+b.DupInFlight+b.DupOther,
		fmt.Sprintf("A: audit %d, inbox %d, in-flight %d; B (keyed by outbox id): memory %d, inbox %d, in-flight %d",
			a.DupAudit, a.DupStore+a.DupOther, a.DupInFlight, b.DupAudit, b.DupStore+b.DupOther, b.DupInFlight))
	row("retries", a.Retries+b.Retries, fmt.Sprintf("handler failures A %d (panics %d), each rolling back its send; B %d (panics %d)",
		a.Failures, a.Panics, b.Failures, b.Panics))
	row("dead-lettered", r.dlqDepth, "distinct messages in the dead-letter queue after -max-attempts")
	var total uint64
	var by []string
	for _, role := range chainRoles {
		total += r.kills[role]
		by = append(by, fmt.Sprintf("%s %d", chainRoleName(role), r.kills[role]))
	}
	row("kills", total, "SIGKILL at a random point, then a new process: "+strings.Join(by, ", "))
	row("connection cuts", r.cuts, "every connection to the model (A, relay, B) at once; one per graceful restart included")
	row("failover replays", r.replayed, "copies of already-delivered messages, on queue A and queue B")
	row("consumer restarts", r.restarts, "of consumer A, graceful, from the persisted audit snapshot")
	row("left on the broker", r.leftOnBroker, "queue A + queue B, never acknowledged, at the end")
	row("lost", c.lost, "sent, neither applied by B nor dead-lettered; must be 0")
	row("applied twice", c.twiceA+c.twiceB, fmt.Sprintf("A %d, B %d; must be 0", c.twiceA, c.twiceB))
	row("ghosts", c.ghosts, "applied by B, not committed by A (no ledger row, or another order key or number); must be 0")
	row("order violations", c.order, "B applied a producer's messages out of A's commit order; must be 0")
	row("elapsed", r.elapsed.Round(time.Millisecond), "")
	row("throughput", fmt.Sprintf("%.0f msgs/s", float64(r.sent)/math.Max(r.elapsed.Seconds(), 1e-9)), "through the whole chain")
	tw.Flush()
	if total > 0 {
		fmt.Fprintln(w, "(counters of a killed process are as of its last report, at most 20ms before its death;"+
			" sent, applied, relayed and the checks are exact)")
	}
	var fails []string
	for _, f := range []struct {
		n    int64
		what string
	}{{c.lost, "messages lost"}, {c.twiceA + c.twiceB, "messages applied twice"}, {c.ghosts, "ghosts"}, {c.order, "order violations"}} {
		if f.n > 0 {
			fails = append(fails, f.what)
		}
	}
	switch {
	case r.timedOut:
		fmt.Fprintln(w, "FAIL: timed out before every message was accounted for")
	case len(fails) > 0:
		fmt.Fprintln(w, "FAIL: "+strings.Join(fails, ", "))
	case r.dlqDepth > 0:
		fmt.Fprintf(w, "OK: nothing lost, applied twice, ghostly or out of order (%d messages dead-lettered after -max-attempts)\n", r.dlqDepth)
	default:
		fmt.Fprintln(w, "OK: every message applied exactly once by A and by B, in order, no ghost")
	}
}

// chainFault is one fault of a -chain plan, due when the progress of its
// target reaches at of n: a kill of target, a cut of every connection, a
// replay on target's queue, or a graceful restart of consumer A.
type chainFault struct {
	at     float64
	kind   string
	target string
}

// chainPlan returns the faults of a -chain run: kills at seeded random
// points, taking A, the relay and B in turn, and the other faults spread
// evenly.
func chainPlan(cfg demoConfig) []chainFault {
	var fs []chainFault
	rng := rand.New(rand.NewPCG(cfg.seed, 0x6b696c6c))
	for i := range cfg.kills {
		fs = append(fs, chainFault{0.03 + 0.92*rng.Float64(), "kill", chainRoles[i%len(chainRoles)]})
	}
	for _, at := range demoMilestones(cfg.cuts, 0.05, 0.9) {
		fs = append(fs, chainFault{at, "cut", chainB})
	}
	for i, at := range demoMilestones(cfg.replays, 0.1, 0.95) {
		fs = append(fs, chainFault{at, "replay", []string{chainA, chainB}[i%2]})
	}
	for _, at := range demoMilestones(cfg.restarts, 0.2, 0.8) {
		fs = append(fs, chainFault{at, "restart", chainA})
	}
	return fs
}

// chainRun is the parent's state in a -chain run.
type chainRun struct {
	cfg            demoConfig
	queueA, queueB string
	b              *brokermodel.Broker
	srv            *modelServer
	procs          map[string]*demoProcs
	ledA, ledB     *demoLedger
	ob             *outbox.Outbox // the parent's view of A's outbox: its backlog
	sent           atomic.Uint64
	finished       time.Time
}

// demoChain runs the -chain demo. cfg.timeout bounds everything up to the
// final accounting, which only signals (sig) stop.
func demoChain(sig context.Context, cfg demoConfig, stderr io.Writer) (chainReport, error) {
	rep := chainReport{kills: map[string]uint64{}}
	ctx, cancel := context.WithTimeout(sig, cfg.timeout)
	defer cancel()
	dir, err := os.MkdirTemp("", "msgaudit-demo-")
	if err != nil {
		return rep, err
	}
	defer os.RemoveAll(dir)
	if cfg.queue == "" {
		cfg.queue = fmt.Sprintf("/queue/msgaudit.demo.%d", time.Now().UnixNano())
	}
	d := &chainRun{cfg: cfg, queueA: cfg.queue, queueB: cfg.queue + ".b", procs: map[string]*demoProcs{}}
	d.b = brokermodel.New(brokermodel.Options{})
	defer d.b.Close()
	ln, err := net.Listen("unix", filepath.Join(dir, "broker.sock"))
	if err != nil {
		return rep, err
	}
	d.srv = serveModel(d.b, ln)
	defer d.srv.Close()
	exe, err := os.Executable()
	if err != nil {
		return rep, fmt.Errorf("cannot find the msgaudit executable to start the chain's processes: %w", err)
	}
	dbA, dbB := filepath.Join(dir, chainA, "ledger.db"), filepath.Join(dir, chainB, "ledger.db")
	lw := &demoLockedWriter{w: stderr}
	for _, role := range chainRoles {
		sub := filepath.Join(dir, role)
		if err := os.Mkdir(sub, 0o700); err != nil {
			return rep, err
		}
		ctl, err := net.Listen("unix", filepath.Join(sub, "control.sock"))
		if err != nil {
			return rep, err
		}
		defer ctl.Close()
		base := demoChildConfig{Role: role, Guard: guardInbox, BrokerSock: ln.Addr().String(), ControlSock: ctl.Addr().String(),
			Workers: cfg.workers, Prefetch: cfg.prefetch, MaxAttempts: cfg.maxAttempts, FailRate: cfg.failRate,
			PanicRate: cfg.panicRate, Seed: cfg.seed}
		switch role {
		case chainA:
			base.Queue, base.QueueOut, base.DB, base.Namespace = d.queueA, d.queueB, dbA, "msgaudit-demo"+d.queueA
			base.LoseKey, base.GhostKey = cfg.loseKey, cfg.ghostKey
		case chainRelay:
			base.DB, base.DupKey = dbA, cfg.dupKey
		case chainB:
			base.Queue, base.DB, base.Namespace = d.queueB, dbB, "msgaudit-demo"+d.queueB
			base.Unordered = cfg.unorderedB
		}
		p := &demoProcs{exe: exe, dir: sub, ctl: ctl, stderr: lw, base: base, name: chainRoleName(role)}
		d.procs[role] = p
		defer p.shutdown()
	}
	// The parent creates the ledgers' tables and the outbox before any
	// child starts, and reads them at the end.
	if d.ledA, err = openChainLedger(dbA); err != nil {
		return rep, fmt.Errorf("ledger A: %w", err)
	}
	defer d.ledA.close()
	if d.ledB, err = openChainLedger(dbB); err != nil {
		return rep, fmt.Errorf("ledger B: %w", err)
	}
	defer d.ledB.close()
	if d.ob, err = outbox.New(ctx, d.ledA.db, outbox.Options{Dialect: inbox.SQLite, Table: chainOutboxTable}); err != nil {
		return rep, err
	}
	defer d.ob.Close()

	var bar *progressbar.ProgressBar
	if cfg.progress {
		bar = progressbar.NewOptions(cfg.n, progressbar.OptionSetWriter(stderr), progressbar.OptionSetDescription("applied by B or dead-lettered"),
			progressbar.OptionShowCount(), progressbar.OptionThrottle(100*time.Millisecond), progressbar.OptionSetWidth(30),
			progressbar.OptionShowIts(), progressbar.OptionSetItsString("msg"))
	}
	start := time.Now()
	var pwg sync.WaitGroup
	perr := make(chan error, cfg.producers)
	for p := range cfg.producers {
		pwg.Add(1)
		go func() {
			defer pwg.Done()
			if err := d.produce(ctx, p); err != nil {
				perr <- err
			}
		}()
	}
	err = d.drive(ctx, &rep, bar, perr)
	pwg.Wait()
	for _, role := range chainRoles {
		d.procs[role].shutdown()
	}
	rep.elapsed = time.Since(start)
	if !d.finished.IsZero() {
		rep.elapsed = d.finished.Sub(start)
	}
	if bar != nil {
		_ = bar.Finish()
		fmt.Fprintln(stderr)
	}
	if err != nil {
		return rep, err
	}
	return rep, d.account(sig, &rep)
}

// produce sends producer p's messages to queue A.
func (d *chainRun) produce(ctx context.Context, p int) error {
	c, err := d.b.Connect()
	if err != nil {
		return err
	}
	defer c.Close()
	for i := p; i < d.cfg.n && ctx.Err() == nil; i += d.cfg.producers {
		key := demoKey(p, i)
		if _, err := c.Send(d.queueA, []byte("payload of "+key), brokermodel.SendOptions{
			Persistent: true, Headers: map[string]string{demoKeyHeader: key}}); err != nil {
			return fmt.Errorf("producer %d: %w", p, err)
		}
		d.sent.Add(1)
	}
	return nil
}

// modelRole is the broker model's role of a -chain process's connections.
func (d *chainRun) modelRole(role string) string {
	switch role {
	case chainA:
		return "sub:" + d.queueA
	case chainB:
		return "sub:" + d.queueB
	}
	return "send"
}

// restart starts role's next process once the model has cut the
// connections of the last one, so that what it had not acknowledged is
// back on its queue, in order, before its successor subscribes.
func (d *chainRun) restart(ctx context.Context, role, snapshot string) error {
	if err := d.srv.waitGone(ctx, d.modelRole(role)); err != nil {
		return err
	}
	return d.procs[role].start(ctx, snapshot)
}

// drive starts the three processes and runs the fault plan against their
// progress until the chain has settled: everything sent, queue A empty,
// A's outbox sent, queue B empty. Progress: A's ledger rows for A, the
// messages stored for the relay, B's ledger rows for B and the cuts, each
// plus the dead letters.
func (d *chainRun) drive(ctx context.Context, rep *chainReport, bar *progressbar.ProgressBar, perr <-chan error) error {
	for _, role := range chainRoles {
		if err := d.procs[role].start(ctx, ""); err != nil {
			return err
		}
	}
	faults := chainPlan(d.cfg)
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	n := int64(d.cfg.n)
	for {
		for _, role := range chainRoles {
			if err := d.procs[role].exitedByItself(); err != nil {
				return err
			}
		}
		appliedA, errA := d.ledA.count(ctx)
		appliedB, errB := d.ledB.count(ctx)
		if err := errors.Join(errA, errB); err != nil {
			if ctx.Err() == context.DeadlineExceeded {
				rep.timedOut = true
				return nil
			}
			return fmt.Errorf("ledger: %w", err)
		}
		pending, inFlight := d.b.Depth(brokermodel.DLQ)
		dead := int64(pending + inFlight)
		progress := map[string]int64{chainA: appliedA + dead, chainRelay: int64(d.srv.sends.Load()) + dead, chainB: appliedB + dead}
		if bar != nil {
			_ = bar.Set64(min(progress[chainB], n))
		}
		left := faults[:0]
		for _, f := range faults {
			if float64(progress[f.target]) < f.at*float64(n) {
				left = append(left, f)
				continue
			}
			if err := d.fault(ctx, rep, f); err != nil {
				return err
			}
		}
		faults = left
		if progress[chainB] >= n && d.finished.IsZero() {
			d.finished = time.Now()
		}
		select {
		case err := <-perr:
			return err
		default:
		}
		if settled, err := d.settled(ctx); err != nil || settled {
			if err != nil && ctx.Err() == context.DeadlineExceeded {
				rep.timedOut = true
				return nil
			}
			if err != nil {
				return err
			}
			for _, role := range chainRoles {
				if err := d.procs[role].stop(); err != nil {
					return err
				}
			}
			return nil
		}
		select {
		case <-ctx.Done():
			if ctx.Err() == context.DeadlineExceeded {
				rep.timedOut = true
				return nil
			}
			return ctx.Err()
		case <-tick.C:
		}
	}
}

// fault injects f.
func (d *chainRun) fault(ctx context.Context, rep *chainReport, f chainFault) error {
	switch f.kind {
	case "kill":
		if err := d.procs[f.target].kill(); err != nil {
			return err
		}
		rep.kills[f.target]++
		return d.restart(ctx, f.target, "")
	case "cut":
		rep.cuts += uint64(d.srv.Cut())
	case "replay":
		q := d.queueA
		if f.target == chainB {
			q = d.queueB
		}
		d.b.Replay(q, d.cfg.replayN, true)
	case "restart":
		// As in the demo: cut first, so acks of running deliveries are
		// lost, then stop A gracefully (its audit is persisted) and start
		// it again from the snapshot.
		rep.cuts += uint64(d.srv.Cut())
		if err := d.procs[chainA].stop(); err != nil {
			return err
		}
		rep.restarts++
		return d.restart(ctx, chainA, filepath.Join(d.procs[chainA].dir, "audit.snapshot"))
	}
	return nil
}

// settled reports whether every message has gone through: all sent, queue
// A empty (everything acknowledged by A, so committed), A's outbox sent
// (so stored on queue B), queue B empty. Each stays true once true, so
// checking them in this order is enough.
func (d *chainRun) settled(ctx context.Context) (bool, error) {
	if d.sent.Load() != uint64(d.cfg.n) {
		return false, nil
	}
	if p, f := d.b.Depth(d.queueA); p+f > 0 {
		return false, nil
	}
	bl, err := d.ob.Backlog(ctx)
	if err != nil {
		return false, fmt.Errorf("outbox: %w", err)
	}
	if bl.Held > 0 {
		return false, nil
	}
	p, f := d.b.Depth(d.queueB)
	return p+f == 0, nil
}

// account fills rep from the ledgers, the model and the processes'
// counters, and runs the checks.
func (d *chainRun) account(ctx context.Context, rep *chainReport) error {
	var err error
	if rep.appliedA, err = d.ledA.count(ctx); err != nil {
		return fmt.Errorf("ledger A: %w", err)
	}
	if rep.appliedB, err = d.ledB.count(ctx); err != nil {
		return fmt.Errorf("ledger B: %w", err)
	}
	if rep.check.twiceA, err = d.ledA.twice(ctx); err != nil {
		return fmt.Errorf("ledger A: %w", err)
	}
	if rep.check.twiceB, err = d.ledB.twice(ctx); err != nil {
		return fmt.Errorf("ledger B: %w", err)
	}
	sentByA := map[string]chainMsg{}
	rows, err := d.ledA.db.QueryContext(ctx, `SELECT key, order_key, seq FROM chain_out`)
	if err != nil {
		return fmt.Errorf("ledger A: %w", err)
	}
	for rows.Next() {
		var m chainMsg
		if err := rows.Scan(&m.key, &m.orderKey, &m.seq); err != nil {
			rows.Close()
			return err
		}
		sentByA[m.key] = m
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return fmt.Errorf("ledger A: %w", err)
	}
	var appliedB []chainMsg
	rows, err = d.ledB.db.QueryContext(ctx, `SELECT key, order_key, seq FROM chain_in ORDER BY rowid`)
	if err != nil {
		return fmt.Errorf("ledger B: %w", err)
	}
	for rows.Next() {
		var m chainMsg
		if err := rows.Scan(&m.key, &m.orderKey, &m.seq); err != nil {
			rows.Close()
			return err
		}
		appliedB = append(appliedB, m)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return fmt.Errorf("ledger B: %w", err)
	}
	dlq := map[string]bool{}
	for _, m := range d.b.Browse(brokermodel.DLQ) {
		dlq[m.Headers[demoKeyHeader]] = true
	}
	var sent []string
	demoKeys(d.cfg.n, d.cfg.producers, func(k string) { sent = append(sent, k) })
	rep.check.lost, rep.check.ghosts, rep.check.order = checkChain(sent, sentByA, appliedB, dlq)
	rep.sent = d.sent.Load()
	rep.relayed, rep.resent = d.srv.sends.Load(), d.srv.resends.Load()
	rep.stA, rep.stB = d.procs[chainA].totals(), d.procs[chainB].totals()
	st := d.b.Stats()
	rep.deliveries, rep.redelivs, rep.replayed = st.Delivered, st.Redelivered, st.Replayed
	pa, fa := d.b.Depth(d.queueA)
	pb, fb := d.b.Depth(d.queueB)
	rep.leftOnBroker = pa + fa + pb + fb
	rep.dlqDepth = len(dlq)
	return nil
}
