package e2e

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/acemq/msgaudit/inbox"
	"github.com/acemq/msgaudit/outbox"
)

// DrainConcurrency is how many confirmed publishes the bare client of
// OutboxDrain keeps in flight: the relay's default Options.Concurrency.
const DrainConcurrency = 32

// drainSenders is how many goroutines record OutboxDrain's backlog
// (untimed), and drainTxRows how many rows each of their transactions
// holds.
const (
	drainSenders = 4
	drainTxRows  = 5000
)

// latencyWorkers is how many transactions OutboxLatency runs at once at
// most: enough that a slow COMMIT does not hold up the next due one.
const latencyWorkers = 16

// relayPoll is how often waitRelayed samples the outbox's backlog.
const relayPoll = 5 * time.Millisecond

// outputs is a broker's side of the outbox's measurements: the queue
// (STOMP, AMQP) or stream (NATS) the outgoing messages go to, msgaudit's
// Publisher and the bare client's confirmed publish.
type outputs interface {
	// declareOut creates the output (a durable queue, a stream).
	declareOut(ctx context.Context, n names) error
	// outDest is the output as an outbox.Message's Destination.
	outDest(n names) string
	// countOut counts the messages on the output, untimed, after a run
	// that sent want of them (STOMP consumes them to count them).
	countOut(ctx context.Context, n names, want int) (int, error)
	// cleanupOut removes the output.
	cleanupOut(ctx context.Context, n names) error
	// newPublisher connects the transport's outbox.Publisher.
	newPublisher(ctx context.Context) (outbox.Publisher, func(), error)
	// barePublisher connects the bare client's publisher to the output.
	barePublisher(ctx context.Context, n names) (*barePub, error)
	// receiveOut consumes the output, calling got with each body as it
	// arrives, until stop.
	receiveOut(ctx context.Context, n names, got func(body []byte)) (stop func() error, err error)
}

// barePub is a bare client's confirmed publisher, safe for concurrent
// use: publish returns once the broker confirmed the message.
type barePub struct {
	publish func(ctx context.Context, body []byte) error
	close   func() error
}

// outQueue names the output: a queue, a NATS subject.
func outQueue(n names) string { return n.queue + ".out" }

// outboxTable is the outbox table of a measurement.
func outboxTable(n names) string { return "ob_" + n.ident }

// waitRelayed returns once ob holds no message not yet sent, sampling
// its Backlog every relayPoll; with ready not nil it first waits until
// ready reports true (checked every millisecond, without a query).
func waitRelayed(ctx context.Context, ob *outbox.Outbox, ready func() bool) error {
	for ready != nil && !ready() {
		if !sleepCtx(ctx, time.Millisecond) {
			return fmt.Errorf("waiting for the relay's publishes: %w", ctx.Err())
		}
	}
	for {
		b, err := ob.Backlog(ctx)
		if err != nil {
			return err
		}
		if b.Held == 0 {
			return nil
		}
		if !sleepCtx(ctx, relayPoll) {
			return fmt.Errorf("the outbox still holds %d messages: %w", b.Held, ctx.Err())
		}
	}
}

func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// countingPublisher counts the publishes the broker confirmed.
type countingPublisher struct {
	p  outbox.Publisher
	ok atomic.Int64
}

func (c *countingPublisher) Publish(ctx context.Context, id string, m outbox.Message) error {
	err := c.p.Publish(ctx, id, m)
	if err == nil {
		c.ok.Add(1)
	}
	return err
}

// body is the body of every message of a measurement.
func (p *plan) body() []byte {
	body := make([]byte, p.BodyBytes)
	for i := range body {
		body[i] = 'a' + byte(i%26)
	}
	return body
}

// meter reads the CPU time of this process and, where there is a /proc,
// of every process on the machine, around a measurement's clock.
type meter struct {
	procs0, procs1 *procSnapshot
	stat0, stat1   cpuStat
	cpu0, cpu1     time.Duration
	ok             bool
}

// startMeter takes the readings before the clock starts.
func startMeter() *meter {
	runtime.GC()
	m := &meter{}
	var okP, okS bool
	m.procs0, okP = readProcs()
	m.stat0, okS = readCPUStat()
	m.cpu0, _ = cpuTime()
	m.ok = okP && okS
	return m
}

// stop takes the readings after the clock stopped.
func (m *meter) stop() {
	m.cpu1, _ = cpuTime()
	m.stat1, _ = readCPUStat()
	var ok bool
	m.procs1, ok = readProcs()
	m.ok = m.ok && ok
}

// sample is a Sample of messages in elapsed, with the CPU time read.
func (m *meter) sample(v variant, round, messages int, elapsed time.Duration, broker *server, store servers) Sample {
	s := Sample{
		Broker:    v.broker,
		Variant:   v.name,
		Round:     round,
		Messages:  messages,
		Seconds:   elapsed.Seconds(),
		Rate:      float64(messages) / elapsed.Seconds(),
		CPUMicros: float64(m.cpu1-m.cpu0) / float64(time.Microsecond) / float64(messages),
	}
	if m.ok {
		s.Machine = machineCPU(m.procs0, m.procs1, m.stat0, m.stat1, broker, store, os.Getpid(), messages)
	}
	return s
}

// openOutboxDB opens the PostgreSQL database of an outbox measurement
// with conns connections and, when table is not "", an outbox on table;
// closeDB drops table and the extra tables and closes the database.
func (p *plan) openOutboxDB(ctx context.Context, conns int, table string, extra ...string) (db *sql.DB, ob *outbox.Outbox, closeDB func(context.Context) error, err error) {
	db, err = sql.Open("pgx", p.PostgresURL)
	if err != nil {
		return nil, nil, nil, err
	}
	db.SetMaxOpenConns(conns)
	db.SetMaxIdleConns(conns)
	closeDB = func(ctx context.Context) error {
		var errs []error
		if ob != nil {
			errs = append(errs, ob.Close())
		}
		for _, t := range append(extra, table) {
			if t != "" {
				_, err := db.ExecContext(ctx, `DROP TABLE IF EXISTS "`+t+`"`)
				errs = append(errs, err)
			}
		}
		return errors.Join(append(errs, db.Close())...)
	}
	if table != "" {
		if ob, err = outbox.New(ctx, db, outbox.Options{Dialect: inbox.PostgreSQL, Table: table}); err != nil {
			return nil, nil, nil, errors.Join(err, closeDB(ctx))
		}
	}
	return db, ob, closeDB, nil
}

// cleanupCtx runs f with a fresh minute-long context that outlives ctx's
// cancellation, joining its error into *err.
func cleanupCtx(ctx context.Context, err *error, f func(context.Context) error) {
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
	defer cancel()
	*err = errors.Join(*err, f(cctx))
}

// measureDrain runs one round of OutboxDrain: outbox-drain records
// Messages rows untimed, then the clock runs from the relay's start until
// the outbox holds none (sampled once the publisher has confirmed
// Messages publishes); bare-drain publishes Messages messages from
// memory, DrainConcurrency at once, each confirmed. The output must then
// hold Messages.
func (p *plan) measureDrain(ctx context.Context, v variant, round int, out outputs, n names) (s Sample, err error) {
	if err := out.declareOut(ctx, n); err != nil {
		return s, fmt.Errorf("declaring the output: %w", err)
	}
	defer cleanupCtx(ctx, &err, func(ctx context.Context) error { return out.cleanupOut(ctx, n) })
	body, dest, total := p.body(), out.outDest(n), p.Messages
	// timed runs the drain and returns when its clock stops.
	var timed func(ctx context.Context) (time.Time, error)
	switch v.kind {
	case outboxDrain:
		var (
			db       *sql.DB
			ob       *outbox.Outbox
			closeDB  func(context.Context) error
			pub      outbox.Publisher
			closePub func()
		)
		if db, ob, closeDB, err = p.openOutboxDB(ctx, drainSenders+2, outboxTable(n)); err != nil {
			return s, err
		}
		defer cleanupCtx(ctx, &err, closeDB)
		if err := recordBacklog(ctx, db, ob, total, dest, body); err != nil {
			return s, fmt.Errorf("recording the backlog: %w", err)
		}
		if pub, closePub, err = out.newPublisher(ctx); err != nil {
			return s, err
		}
		defer closePub()
		cp := &countingPublisher{p: pub}
		timed = func(ctx context.Context) (time.Time, error) {
			rctx, stop := context.WithCancel(ctx)
			ran := make(chan error, 1)
			go func() { ran <- ob.Run(rctx, cp) }()
			wctx, cancel := context.WithTimeout(ctx, p.Timeout)
			werr := waitRelayed(wctx, ob, func() bool { return cp.ok.Load() >= int64(total) })
			end := time.Now()
			cancel()
			stop()
			return end, errors.Join(werr, <-ran)
		}
	default: // bareDrain
		var bp *barePub
		if bp, err = out.barePublisher(ctx, n); err != nil {
			return s, err
		}
		defer cleanupCtx(ctx, &err, func(context.Context) error { return bp.close() })
		timed = func(ctx context.Context) (time.Time, error) {
			var next atomic.Int64
			errs := make(chan error, DrainConcurrency)
			var wg sync.WaitGroup
			for range DrainConcurrency {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for next.Add(1) <= int64(total) {
						if err := bp.publish(ctx, body); err != nil {
							errs <- err
							return
						}
					}
				}()
			}
			wg.Wait()
			end := time.Now()
			close(errs)
			return end, <-errs
		}
	}
	broker, store := p.servers(v)
	m := startMeter()
	start := time.Now()
	end, err := timed(ctx)
	m.stop()
	if err != nil {
		return s, err
	}
	s = m.sample(v, round, total, end.Sub(start), broker, store)
	if s.Sent, err = out.countOut(ctx, n, total); err != nil {
		return s, fmt.Errorf("counting the output: %w", err)
	}
	if s.Sent != total {
		return s, fmt.Errorf("the output holds %d messages, want %d", s.Sent, total)
	}
	return s, nil
}

// recordBacklog records total messages in ob with Send, in transactions
// of drainTxRows rows, drainSenders at once.
func recordBacklog(ctx context.Context, db *sql.DB, ob *outbox.Outbox, total int, dest string, body []byte) error {
	var next atomic.Int64
	errs := make(chan error, drainSenders)
	var wg sync.WaitGroup
	for range drainSenders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				from := next.Add(drainTxRows) - drainTxRows
				if from >= int64(total) {
					return
				}
				rows := min(int64(total)-from, drainTxRows)
				if err := func() error {
					tx, err := db.BeginTx(ctx, nil)
					if err != nil {
						return err
					}
					defer tx.Rollback() //nolint:errcheck // after Commit it is a no-op
					for range rows {
						if err := ob.Send(ctx, tx, outbox.Message{Destination: dest, Body: body}); err != nil {
							return err
						}
					}
					return tx.Commit()
				}(); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	return <-errs
}

// seqLen is the length of the sequence number at the head of a body of
// OutboxLatency: 19 decimal digits, as stampLen.
const seqLen = stampLen

// putSeq writes i (≥ 0) at the head of body (at least seqLen bytes).
func putSeq(body []byte, i int) {
	for k := seqLen - 1; k >= 0; k-- {
		body[k] = byte('0' + i%10)
		i /= 10
	}
}

// seqOf reads the number putSeq wrote; ok is false without one.
func seqOf(body []byte) (int, bool) {
	if len(body) < seqLen {
		return 0, false
	}
	i, err := strconv.Atoi(string(body[:seqLen]))
	return i, err == nil && i >= 0
}

// pairLatencies returns, for every i with both times set (Unix
// nanoseconds, 0 for none), recv[i] - commit[i], and how many i lack one
// of them.
func pairLatencies(commit, recv []int64) (d []time.Duration, missing int) {
	d = make([]time.Duration, 0, len(commit))
	for i := range commit {
		if commit[i] == 0 || i >= len(recv) || recv[i] == 0 {
			missing++
			continue
		}
		d = append(d, time.Duration(recv[i]-commit[i]))
	}
	return d, missing
}

// measureLatency runs one round of OutboxLatency: Messages sends at
// Rate, each in a transaction of its own (outbox-latency: Send and
// COMMIT, the relay running here; bare-latency: an INSERT with
// autocommit, then a confirmed publish), and a consumer of the output
// that records each message's arrival. Each message's latency is its
// arrival minus the return of its COMMIT (bare: of its INSERT).
func (p *plan) measureLatency(ctx context.Context, v variant, round int, out outputs, n names) (s Sample, err error) {
	if err := out.declareOut(ctx, n); err != nil {
		return s, fmt.Errorf("declaring the output: %w", err)
	}
	defer cleanupCtx(ctx, &err, func(ctx context.Context) error { return out.cleanupOut(ctx, n) })
	total, dest := p.Messages, out.outDest(n)
	table := ""
	if v.kind == outboxLatency {
		table = outboxTable(n)
	}
	fxTable := "fx_" + n.ident
	db, ob, closeDB, err := p.openOutboxDB(ctx, latencyWorkers+4, table, fxTable)
	if err != nil {
		return s, err
	}
	defer cleanupCtx(ctx, &err, closeDB)
	commit, recv := make([]int64, total), make([]int64, total)
	var received, strays atomic.Int64
	all := make(chan struct{})
	stopRecv, err := out.receiveOut(ctx, n, func(body []byte) {
		now := time.Now().UnixNano()
		i, ok := seqOf(body)
		if !ok || i >= total || !atomic.CompareAndSwapInt64(&recv[i], 0, now) {
			strays.Add(1) // a resend, or not ours
			return
		}
		if received.Add(1) == int64(total) {
			close(all)
		}
	})
	if err != nil {
		return s, fmt.Errorf("consuming the output: %w", err)
	}
	defer cleanupCtx(ctx, &err, func(context.Context) error { return stopRecv() })
	var send func(ctx context.Context, i int, body []byte) error
	if v.kind == outboxLatency {
		var (
			pub      outbox.Publisher
			closePub func()
		)
		if pub, closePub, err = out.newPublisher(ctx); err != nil {
			return s, err
		}
		defer closePub()
		rctx, stopRelay := context.WithCancel(ctx)
		ran := make(chan error, 1)
		go func() { ran <- ob.Run(rctx, pub) }()
		defer func() { stopRelay(); err = errors.Join(err, <-ran) }()
		send = func(ctx context.Context, i int, body []byte) error {
			tx, err := db.BeginTx(ctx, nil)
			if err != nil {
				return err
			}
			defer tx.Rollback() //nolint:errcheck // after Commit it is a no-op
			if err := ob.Send(ctx, tx, outbox.Message{Destination: dest, Body: body}); err != nil {
				return err
			}
			if err := tx.Commit(); err != nil {
				return err
			}
			atomic.StoreInt64(&commit[i], time.Now().UnixNano())
			return nil
		}
	} else {
		if _, err := db.ExecContext(ctx, `CREATE TABLE "`+fxTable+`" (id VARCHAR(255) PRIMARY KEY, body TEXT NOT NULL)`); err != nil {
			return s, err
		}
		var bp *barePub
		if bp, err = out.barePublisher(ctx, n); err != nil {
			return s, err
		}
		defer cleanupCtx(ctx, &err, func(context.Context) error { return bp.close() })
		insert := `INSERT INTO "` + fxTable + `" (id, body) VALUES ($1, $2)`
		send = func(ctx context.Context, i int, body []byte) error {
			if _, err := db.ExecContext(ctx, insert, strconv.Itoa(i), string(body)); err != nil {
				return err
			}
			atomic.StoreInt64(&commit[i], time.Now().UnixNano())
			return bp.publish(ctx, body)
		}
	}
	broker, store := p.servers(v)
	body := p.body()
	m := startMeter()
	start := time.Now()
	sctx, stopSending := context.WithCancel(ctx)
	defer stopSending()
	failed := make(chan error, 1)
	work := make(chan int)
	var wg sync.WaitGroup
	for range latencyWorkers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range work {
				b := slices.Clone(body)
				putSeq(b, i)
				if err := send(sctx, i, b); err != nil {
					select {
					case failed <- fmt.Errorf("message %d: %w", i, err):
					default:
					}
					stopSending()
					return
				}
			}
		}()
	}
	go func() {
		// The i-th send is due at start + i/Rate; a dispatcher that fell
		// behind (every worker busy) sends at once.
		defer close(work)
		interval := float64(time.Second) / p.Rate
		for i := range total {
			if d := time.Until(start.Add(time.Duration(float64(i) * interval))); d > 0 && !sleepCtx(sctx, d) {
				return
			}
			select {
			case work <- i:
			case <-sctx.Done():
				return
			}
		}
	}()
	t := time.NewTimer(p.Timeout)
	defer t.Stop()
	select {
	case <-all:
	case err = <-failed:
	case <-t.C:
		err = fmt.Errorf("%d of %d messages arrived within %v", received.Load(), total, p.Timeout)
	case <-ctx.Done():
		err = ctx.Err()
	}
	m.stop()
	stopSending()
	wg.Wait()
	if err != nil {
		return s, err
	}
	last := slices.Max(recv)
	s = m.sample(v, round, total, time.Unix(0, last).Sub(start), broker, store)
	d, missing := pairLatencies(commit, recv)
	if missing > 0 {
		return s, fmt.Errorf("%d of %d messages without a commit or arrival time", missing, total)
	}
	l := &latencies{d: d}
	s.P50Millis, s.P99Millis, _ = l.quantiles()
	s.Sent = int(received.Load())
	if k := strays.Load(); k > 0 {
		return s, fmt.Errorf("%d messages arrived twice or unnumbered", k)
	}
	return s, nil
}
