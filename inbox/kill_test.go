package inbox_test

import (
	"bufio"
	"context"
	"database/sql"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/acemq/msgaudit/idempotency"
	"github.com/acemq/msgaudit/idempotency/sqlitestore"
	"github.com/acemq/msgaudit/inbox"
	"github.com/acemq/msgaudit/receiver"
	_ "github.com/jackc/pgx/v5/stdlib"
)

// Environment of the child process killChild runs as.
const (
	envChild   = "MSGAUDIT_INBOX_KILL_CHILD" // the mode
	envDialect = "MSGAUDIT_INBOX_KILL_DIALECT"
	envDSN     = "MSGAUDIT_INBOX_KILL_DSN"
	envTable   = "MSGAUDIT_INBOX_KILL_TABLE"
	envFX      = "MSGAUDIT_INBOX_KILL_FX"
	envKey     = "MSGAUDIT_INBOX_KILL_KEY"
	envStore   = "MSGAUDIT_INBOX_KILL_STORE"
)

// Child modes: where the child stops (and prints a line) for the parent
// to SIGKILL it.
const (
	killAfterEffect = "after-effect" // inbox: effect written in the tx, not committed
	killBeforeAck   = "before-ack"   // inbox: committed, the transport's ack not sent
	killStoreEffect = "store-effect" // external store: effect committed, claim not confirmed
	killBatchEffect = "batch-effect" // inbox: a batch's effects written in its tx, not committed
	killBatchAcked  = "batch-acked"  // inbox: a batch committed, the transport's acks not sent
)

// batchKeys is how many deliveries the batch modes run in one batch.
const batchKeys = 6

// TestSIGKILL kills a consumer process with SIGKILL at the two points that
// matter and redelivers the message to a fresh process:
//
//   - inbox, killed after the handler wrote its effect but before the
//     commit: the database rolls both back; the redelivery applies the
//     message once.
//   - inbox, killed after the commit but before the acknowledgement: the
//     redelivery is recognised from the row; the handler does not run.
//   - an external idempotency store (SQLite), killed after the handler
//     committed its effect but before the store's confirm: once the claim's
//     lease lapses the redelivery is claimed again and applied a second
//     time. This is the failure the inbox exists for, shown, not fixed.
func TestSIGKILL(t *testing.T) {
	forEachBackend(t, func(t *testing.T, newBackend func(t testing.TB) *backend) {
		b := newBackend(t)
		ib := b.newInbox(t, inbox.Options{})
		dsn := os.Getenv("MSGAUDIT_POSTGRES_URL")
		if b.dialect != inbox.PostgreSQL {
			dsn = b.dsn
		}
		cases := []struct {
			mode    string
			ran     bool // the redelivery runs the handler
			applied int  // the effect's count after the redelivery
		}{
			{killAfterEffect, true, 1},
			{killBeforeAck, false, 1},
			{killStoreEffect, true, 2},
		}
		for _, c := range cases {
			t.Run(c.mode, func(t *testing.T) {
				key := "kill-" + randHex(6)
				storePath := filepath.Join(t.TempDir(), "store.db")
				runChildAndKill(t, c.mode, map[string]string{envDialect: b.dialect.String(), envDSN: dsn,
					envTable: b.table, envFX: b.fx, envKey: key, envStore: storePath})
				ran := false
				h := func(ctx context.Context, tx *sql.Tx, m *receiver.Message) error {
					ran = true
					return b.apply(ctx, tx, m.Key, "ok")
				}
				var res receiver.Result
				if c.mode == killStoreEffect {
					// The claim the dead process left behind lapses; a clock
					// past its lease stands for the wait, without sleeping.
					later := idempotency.ClockFunc(func() time.Time { return time.Now().Add(time.Hour) })
					st, err := sqlitestore.Open(context.Background(), storePath, sqlitestore.Options{Options: idempotency.Options{ClaimTTL: time.Minute, Clock: later}})
					if err != nil {
						t.Fatal(err)
					}
					defer st.Close()
					r, err := receiver.New(receiver.Config{Store: st, Clock: later})
					if err != nil {
						t.Fatal(err)
					}
					res = process(t, r, msg(key), func(ctx context.Context, m *receiver.Message) error {
						return applyOutside(ctx, b, m.Key, func() { ran = true })
					})
				} else {
					if c.mode == killAfterEffect && contains(t, ib, key) {
						t.Error("the killed process's uncommitted key is recorded")
					}
					if c.mode == killBeforeAck && !contains(t, ib, key) {
						t.Error("the killed process's committed key is not recorded")
					}
					res = process(t, newReceiver(t, ib, nil), msg(key), inbox.Handler(h))
				}
				if res.Action != receiver.Ack || ran != c.ran {
					t.Errorf("redelivery: %v (%s, %v), handler ran %v; want an ack, ran %v", res.Action, res.Reason, res.Err, ran, c.ran)
				}
				if n := b.applied(t, key); n != c.applied {
					t.Errorf("effect applied %d times; want %d", n, c.applied)
				}
			})
		}
	})
}

// TestSIGKILLBatch kills a consumer process with SIGKILL in the middle of a
// batch of deliveries sharing one lane's transaction, and redelivers every
// message to a fresh process:
//
//   - killed while the batch's last member runs its handler, the effects of
//     the members before it written but not committed: the database rolls
//     them all back; each redelivery applies its message once.
//   - killed after the batch's COMMIT, before any acknowledgement: every
//     redelivery is recognised from its row; no handler runs.
//
// Lost 0 (every effect committed), twice 0 (none committed twice).
func TestSIGKILLBatch(t *testing.T) {
	forEachBackend(t, func(t *testing.T, newBackend func(t testing.TB) *backend) {
		b := newBackend(t)
		ib := b.newInbox(t, inbox.Options{})
		dsn := os.Getenv("MSGAUDIT_POSTGRES_URL")
		if b.dialect != inbox.PostgreSQL {
			dsn = b.dsn
		}
		for _, c := range []struct {
			mode     string
			recorded bool // the keys are committed when the process dies
			ran      bool // the redeliveries run the handler
		}{
			{killBatchEffect, false, true},
			{killBatchAcked, true, false},
		} {
			t.Run(c.mode, func(t *testing.T) {
				keys := make([]string, batchKeys)
				for i := range keys {
					keys[i] = fmt.Sprintf("kb%d-%s", i, randHex(6))
				}
				runChildAndKill(t, c.mode, map[string]string{envDialect: b.dialect.String(), envDSN: dsn,
					envTable: b.table, envFX: b.fx, envKey: strings.Join(keys, ",")})
				lost, twice := 0, 0
				for _, key := range keys {
					if got := contains(t, ib, key); got != c.recorded {
						t.Errorf("%s recorded %v when the process died; want %v", key, got, c.recorded)
					}
					ran := false
					res := process(t, newReceiver(t, ib, nil), msg(key), inbox.Handler(func(ctx context.Context, tx *sql.Tx, m *receiver.Message) error {
						ran = true
						return b.apply(ctx, tx, m.Key, "ok")
					}))
					if res.Action != receiver.Ack || ran != c.ran {
						t.Errorf("redelivery of %s: %v (%s, %v), handler ran %v; want an ack, ran %v", key, res.Action, res.Reason, res.Err, ran, c.ran)
					}
					switch n := b.applied(t, key); {
					case n == 0:
						lost++
					case n > 1:
						twice++
					}
				}
				t.Logf("%s %s: %d deliveries, lost %d, twice %d", b.name, c.mode, len(keys), lost, twice)
				if lost != 0 || twice != 0 {
					t.Errorf("lost %d, twice %d; want 0, 0", lost, twice)
				}
			})
		}
	})
}

// batchChild runs keys as one batch in ib's single lane (keys[0] takes the
// lane and waits in its handler until the others queue behind it) and
// stops at the mode's kill point.
func batchChild(mode string, ib *inbox.Inbox, b *backend, keys []string, stop func(), fail func(error)) {
	r, err := receiver.New(receiver.Config{Selectors: []receiver.Selector{ib}})
	if err != nil {
		fail(err)
	}
	in0, release := make(chan struct{}), make(chan struct{})
	results := make(chan receiver.Result, len(keys))
	for i, key := range keys {
		go func() {
			results <- r.Process(context.Background(), msg(key), inbox.Handler(func(ctx context.Context, tx *sql.Tx, m *receiver.Message) error {
				if i == 0 {
					close(in0)
					<-release
				}
				if err := b.apply(ctx, tx, m.Key, "ok"); err != nil {
					fail(err)
				}
				if i == len(keys)-1 && mode == killBatchEffect {
					stop() // the batch's effects written, not committed
				}
				return nil
			}))
		}()
		if i == 0 {
			<-in0
			continue
		}
		for deadline := time.Now().Add(30 * time.Second); inbox.Waiting(ib) != i; time.Sleep(time.Millisecond) {
			if time.Now().After(deadline) {
				fail(fmt.Errorf("delivery %d never queued for the lane", i))
			}
		}
	}
	close(release)
	for range keys {
		if res := <-results; res.Action != receiver.Ack {
			fail(fmt.Errorf("delivery not acked: %v %s %v", res.Action, res.Reason, res.Err))
		}
	}
	if commits, _ := ib.Batches(); commits != 1 {
		fail(fmt.Errorf("%d COMMITs for the batch; want 1", commits))
	}
	stop() // committed; the transport's acks would come now
}

// applyOutside applies the effect in its own transaction, as a handler
// behind an external store does.
func applyOutside(ctx context.Context, b *backend, key string, ran func()) error {
	ran()
	tx, err := b.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	if err := b.apply(ctx, tx, key, "ok"); err != nil {
		_ = tx.Rollback()
		return err
	}
	return tx.Commit()
}

// runChildAndKill starts this test binary as a killChild process in
// mode, waits for its "ready" line and kills it with SIGKILL.
func runChildAndKill(t *testing.T, mode string, env map[string]string) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$", "-test.count=1") // TestMain runs killChild
	cmd.Env = append(os.Environ(), envChild+"="+mode)
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	ready := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if line := sc.Text(); strings.HasPrefix(line, "ready") || strings.HasPrefix(line, "child failed") {
				ready <- line
				return
			}
		}
		ready <- "child exited"
	}()
	select {
	case line := <-ready:
		if line != "ready" {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
			t.Fatalf("child in mode %s did not get to its kill point: %s\n%s", mode, line, stderr.String())
		}
	case <-time.After(60 * time.Second):
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		t.Fatalf("child in mode %s did not get to its kill point within 60s\n%s", mode, stderr.String())
	}
	if err := cmd.Process.Kill(); err != nil { // SIGKILL on Unix
		t.Fatal(err)
	}
	_ = cmd.Wait()
}

// TestMain makes the test binary the consumer process TestSIGKILL kills
// when it is started with envChild set.
func TestMain(m *testing.M) {
	if mode := os.Getenv(envChild); mode != "" {
		killChild(mode)
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// killChild is the consumer process TestSIGKILL kills: it handles one
// delivery in the given mode and waits at the kill point.
func killChild(mode string) {
	fail := func(err error) {
		fmt.Println("child failed:", err)
		os.Exit(3)
	}
	ctx := context.Background()
	dialect, driver := inbox.SQLite, "sqlite"
	switch os.Getenv(envDialect) {
	case inbox.PostgreSQL.String():
		dialect, driver = inbox.PostgreSQL, "pgx"
	case inbox.MySQL.String():
		dialect, driver = inbox.MySQL, "mysql"
	}
	db, err := sql.Open(driver, os.Getenv(envDSN))
	if err != nil {
		fail(err)
	}
	b := &backend{dialect: dialect, db: db, fx: os.Getenv(envFX)}
	key := os.Getenv(envKey)
	stop := func() { // the kill point: tell the parent, then wait to be killed
		fmt.Println("ready")
		time.Sleep(time.Minute)
		fail(fmt.Errorf("not killed within a minute"))
	}
	if mode == killStoreEffect {
		st, err := sqlitestore.Open(context.Background(), os.Getenv(envStore), sqlitestore.Options{Options: idempotency.Options{ClaimTTL: time.Minute}})
		if err != nil {
			fail(err)
		}
		r, err := receiver.New(receiver.Config{Store: st})
		if err != nil {
			fail(err)
		}
		r.Process(ctx, msg(key), func(ctx context.Context, m *receiver.Message) error {
			if err := applyOutside(ctx, b, m.Key, func() {}); err != nil {
				fail(err)
			}
			stop() // effect committed, claim not confirmed
			return nil
		})
		fail(fmt.Errorf("store mode returned"))
	}
	if mode == killBatchEffect || mode == killBatchAcked {
		ib, err := inbox.New(ctx, db, inbox.Options{Dialect: dialect, Table: os.Getenv(envTable), Lanes: 1, MaxBatch: 63, Linger: time.Minute})
		if err != nil {
			fail(err)
		}
		batchChild(mode, ib, b, strings.Split(key, ","), stop, fail)
		fail(fmt.Errorf("batch mode returned"))
	}
	ib, err := inbox.New(ctx, db, inbox.Options{Dialect: dialect, Table: os.Getenv(envTable)})
	if err != nil {
		fail(err)
	}
	r, err := receiver.New(receiver.Config{Selectors: []receiver.Selector{ib}})
	if err != nil {
		fail(err)
	}
	res := r.Process(ctx, msg(key), inbox.Handler(func(ctx context.Context, tx *sql.Tx, m *receiver.Message) error {
		if err := b.apply(ctx, tx, m.Key, "ok"); err != nil {
			fail(err)
		}
		if mode == killAfterEffect {
			stop() // effect written in the transaction, not committed
		}
		return nil
	}))
	if res.Action != receiver.Ack {
		fail(fmt.Errorf("delivery not acked: %v %s %v", res.Action, res.Reason, res.Err))
	}
	stop() // committed; the transport's ack would come now
}
