package outbox_test

import (
	"bufio"
	"context"
	"database/sql"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/acemq/msgaudit/inbox"
	"github.com/acemq/msgaudit/outbox"
)

// The child processes TestSIGKILL kills.
const (
	envChild   = "MSGAUDIT_OUTBOX_CHILD" // "relay" or "sender"
	envDriver  = "MSGAUDIT_OUTBOX_DRIVER"
	envDSN     = "MSGAUDIT_OUTBOX_DSN"
	envDialect = "MSGAUDIT_OUTBOX_DIALECT"
	envTable   = "MSGAUDIT_OUTBOX_TABLE"
	envLog     = "MSGAUDIT_OUTBOX_LOG" // the relay's "broker": a file of confirmed messages
)

func TestMain(m *testing.M) {
	if mode := os.Getenv(envChild); mode != "" {
		if err := child(mode); err != nil {
			fmt.Fprintln(os.Stderr, "child:", err)
			os.Exit(3)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// filePublisher is a broker that confirms a message once its line is on
// disk (fsync). It then waits a little, widening the window between a
// confirmation and the relay's mark in which the kills land.
type filePublisher struct {
	mu sync.Mutex
	f  *os.File
}

func (p *filePublisher) Publish(ctx context.Context, id string, m outbox.Message) error {
	p.mu.Lock()
	_, err := fmt.Fprintf(p.f, "%s %s\n", id, m.Body)
	if err == nil {
		err = p.f.Sync()
	}
	p.mu.Unlock()
	time.Sleep(time.Duration(rand.IntN(3)) * time.Millisecond)
	return err
}

func child(mode string) error {
	ctx := context.Background()
	dialect := map[string]inbox.Dialect{"sqlite": inbox.SQLite, "pgx": inbox.PostgreSQL, "mysql": inbox.MySQL}[os.Getenv(envDriver)]
	db, err := sql.Open(os.Getenv(envDriver), os.Getenv(envDSN))
	if err != nil {
		return err
	}
	ob, err := outbox.New(ctx, db, outbox.Options{Dialect: dialect, Table: os.Getenv(envTable), Lease: time.Second})
	if err != nil {
		return err
	}
	switch mode {
	case "relay":
		f, err := os.OpenFile(os.Getenv(envLog), os.O_APPEND|os.O_WRONLY|os.O_CREATE, 0o600)
		if err != nil {
			return err
		}
		return ob.Run(ctx, &filePublisher{f: f})
	case "sender":
		fx := os.Getenv(envTable) + "_fx"
		ph := "?"
		if dialect == inbox.PostgreSQL {
			ph = "$1"
		}
		for {
			time.Sleep(2 * time.Millisecond) // a steady load, not a flood the relay drains for minutes
			n := rand.Int64N(1 << 60)
			tx, err := db.BeginTx(ctx, nil)
			if err != nil {
				return err
			}
			if _, err := tx.ExecContext(ctx, `INSERT INTO `+fx+` (n) VALUES (`+ph+`)`, n); err != nil {
				return err
			}
			body := []byte(strconv.FormatInt(n, 10))
			if err := ob.Send(ctx, tx, outbox.Message{Destination: "q", Body: body, OrderKey: "k" + strconv.FormatInt(n%3, 10)}); err != nil {
				return err
			}
			if err := ob.Send(ctx, tx, outbox.Message{Destination: "q2", Body: body}); err != nil {
				return err
			}
			if n%5 == 0 {
				_ = tx.Rollback() // a transaction that never commits sends nothing
				continue
			}
			if err := tx.Commit(); err != nil {
				return err
			}
		}
	}
	return fmt.Errorf("unknown mode %q", mode)
}

// TestSIGKILL kills relay and sender processes with SIGKILL at random
// moments, many between a broker's confirmation and the relay's mark, and
// checks the broker's log: every committed message arrived (none lost),
// none of an uncommitted transaction did (no ghost), and every resend
// carried the id of the first send (absorbed downstream).
func TestSIGKILL(t *testing.T) {
	if testing.Short() {
		t.Skip("kills processes for seconds")
	}
	forEachDB(t, func(t *testing.T, d *db) {
		ctx := context.Background()
		ob := d.outbox(t, outbox.Options{})
		fx := d.table + "_fx"
		if _, err := d.db.ExecContext(ctx, `CREATE TABLE `+fx+` (n BIGINT PRIMARY KEY)`); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { d.drop(t, d.open(t), fx) })
		logPath := filepath.Join(t.TempDir(), "broker.log")
		env := append(os.Environ(), envDriver+"="+d.driver, envDSN+"="+d.dsn, envTable+"="+d.table, envLog+"="+logPath)
		start := func(mode string) *exec.Cmd {
			c := exec.Command(os.Args[0], "-test.run=^$")
			c.Env = append(env, envChild+"="+mode)
			c.Stderr = os.Stderr
			if err := c.Start(); err != nil {
				t.Fatal(err)
			}
			return c
		}
		// Two relays share the table; both are killed in turn.
		procs := map[string]*exec.Cmd{"relay": start("relay"), "relay2": start("relay"), "sender": start("sender")}
		t.Cleanup(func() { // a failed test leaves no child behind
			for _, c := range procs {
				if c.ProcessState == nil {
					_ = c.Process.Signal(syscall.SIGKILL)
					_ = c.Wait()
				}
			}
		})
		kills := map[string]int{}
		kill := func(mode string) {
			c := procs[mode]
			_ = c.Process.Signal(syscall.SIGKILL)
			err := c.Wait()
			if ws, ok := c.ProcessState.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() {
				t.Fatalf("%s exited before the kill: %v", mode, err)
			}
			kills[mode]++
		}
		restart := func(mode string) {
			if mode == "relay2" {
				procs[mode] = start("relay")
				return
			}
			procs[mode] = start(mode)
		}
		for i := range 24 {
			time.Sleep(time.Duration(150+rand.IntN(250)) * time.Millisecond)
			mode := []string{"relay", "sender", "relay2"}[i%3]
			kill(mode)
			restart(mode)
		}
		kill("sender")
		eventually(t, "the backlog drained", func() bool {
			b, err := ob.Backlog(ctx)
			return err == nil && b.Held == 0
		})
		kill("relay")
		kill("relay2")

		committed := map[string]bool{}
		rows, err := d.db.QueryContext(ctx, `SELECT n FROM `+fx)
		if err != nil {
			t.Fatal(err)
		}
		for rows.Next() {
			var n int64
			if err := rows.Scan(&n); err != nil {
				t.Fatal(err)
			}
			committed[strconv.FormatInt(n, 10)] = true
		}
		rows.Close()
		f, err := os.Open(logPath)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		idsOf := map[string]map[string]bool{} // body → ids
		lines, resends := 0, 0
		seen := map[string]bool{}
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			id, body, ok := strings.Cut(sc.Text(), " ")
			if !ok || body == "" {
				continue // a line torn by a kill was never confirmed
			}
			lines++
			if seen[id] {
				resends++
			}
			seen[id] = true
			if idsOf[body] == nil {
				idsOf[body] = map[string]bool{}
			}
			idsOf[body][id] = true
		}
		lost, ghosts, twice := 0, 0, 0
		for n := range committed {
			if len(idsOf[n]) == 0 {
				lost++
			}
		}
		for body, ids := range idsOf {
			if !committed[body] {
				ghosts++
			}
			if len(ids) != 2 { // one id per message, two messages per transaction
				twice++
			}
		}
		t.Logf("%s: %d committed transactions, %d lines on the broker, %d resends of the same id, kills %v; lost %d, ghosts %d, sent under a second id %d",
			d.name, len(committed), lines, resends, kills, lost, ghosts, twice)
		if len(committed) < 20 {
			t.Errorf("only %d transactions committed: the test did not exercise the relay", len(committed))
		}
		if lost+ghosts+twice > 0 {
			t.Errorf("lost %d, ghosts %d, sent under a second id %d; want 0", lost, ghosts, twice)
		}
	})
}
