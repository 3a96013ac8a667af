package chaintest

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	mrand "math/rand/v2"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/acemq/msgaudit/inbox"
	"github.com/acemq/msgaudit/internal/testkit/testenv"
	"github.com/acemq/msgaudit/natsconsumer"
	"github.com/acemq/msgaudit/outbox"
	"github.com/acemq/msgaudit/rabbitconsumer"
	"github.com/acemq/msgaudit/receiver"
	"github.com/acemq/msgaudit/stompconsumer"
	"github.com/go-sql-driver/mysql"
	_ "github.com/jackc/pgx/v5/stdlib"
	_ "modernc.org/sqlite"
)

// config is what a child process reads from envConfig.
type config struct {
	Role      string // "a" or "b"
	Transport string // "stomp", "amqp", "nats"
	Addr      string
	Driver    string // "pgx", "sqlite", "mysql"
	DSNA      string // A's database
	DSNB      string // B's database
	Prefix    string // of every table, queue, stream
	QueueA    string
	QueueB    string
	DLQ       string
	// Plant makes A publish key k7 straight to B, with a fresh id, before
	// its first attempt fails: the fault the outbox exists to prevent,
	// which the checks must catch.
	Plant bool
}

const envConfig = "MSGAUDIT_CHAIN_CHILD"

// groups is the number of order keys A sends under.
const groups = 5

func TestMain(m *testing.M) {
	if raw := os.Getenv(envConfig); raw != "" {
		var cfg config
		if err := json.Unmarshal([]byte(raw), &cfg); err != nil {
			fmt.Fprintln(os.Stderr, "chaintest child:", err)
			os.Exit(3)
		}
		if err := child(cfg); err != nil {
			fmt.Fprintln(os.Stderr, "chaintest child", cfg.Role+":", err)
			os.Exit(3)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

func dialect(driver string) inbox.Dialect {
	return map[string]inbox.Dialect{"pgx": inbox.PostgreSQL, "sqlite": inbox.SQLite, "mysql": inbox.MySQL}[driver]
}

// q rewrites ? placeholders as $n on PostgreSQL.
func q(driver, s string) string {
	if driver != "pgx" {
		return s
	}
	var b strings.Builder
	n := 0
	for _, r := range s {
		if r == '?' {
			n++
			b.WriteString("$" + strconv.Itoa(n))
			continue
		}
		b.WriteRune(r)
	}
	return b.String()
}

func openDB(driver, dsn string) (*sql.DB, error) {
	db, err := sql.Open(driver, dsn)
	if err != nil {
		return nil, err
	}
	db.SetMaxOpenConns(12)
	db.SetMaxIdleConns(12)
	return db, nil
}

// child runs consumer A or B until SIGTERM (or SIGKILL).
func child(cfg config) error {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	dsn := cfg.DSNA
	if cfg.Role == "b" {
		dsn = cfg.DSNB
	}
	db, err := openDB(cfg.Driver, dsn)
	if err != nil {
		return err
	}
	defer db.Close()
	d := dialect(cfg.Driver)
	ib, err := inbox.New(ctx, db, inbox.Options{Dialect: d, Table: cfg.Prefix + cfg.Role + "_in"})
	if err != nil {
		return err
	}
	defer ib.Close()
	var ob *outbox.Outbox
	var handler receiver.Handler
	concurrency, prefetch := 4, 20
	if cfg.Role == "a" {
		ob, err = outbox.New(ctx, db, outbox.Options{Dialect: d, Table: cfg.Prefix + "ob", Lease: 2 * time.Second})
		if err != nil {
			return err
		}
		defer ob.Close()
		fx, seq := cfg.Prefix+"a_fx", cfg.Prefix+"a_seq"
		planted := false
		handler = inbox.Handler(func(ctx context.Context, tx *sql.Tx, m *receiver.Message) error {
			key := string(m.Body)
			if _, err := tx.ExecContext(ctx, q(cfg.Driver, `UPDATE `+fx+` SET n = n + 1 WHERE k = ?`), key); err != nil {
				return err
			}
			i, _ := strconv.Atoi(strings.TrimPrefix(key, "k"))
			group := "g" + strconv.Itoa(i%groups)
			// The group's counter: its row lock orders the group's
			// transactions, and the number is the group's commit order.
			if _, err := tx.ExecContext(ctx, q(cfg.Driver, `UPDATE `+seq+` SET n = n + 1 WHERE g = ?`), group); err != nil {
				return err
			}
			var n int
			if err := tx.QueryRowContext(ctx, q(cfg.Driver, `SELECT n FROM `+seq+` WHERE g = ?`), group).Scan(&n); err != nil {
				return err
			}
			out := outbox.Message{Destination: cfg.QueueB, Body: m.Body, OrderKey: group,
				Headers: map[string]string{"x-group": group, "x-seq": strconv.Itoa(n)}}
			if cfg.Plant && key == "k7" && !planted {
				planted = true
				p, err := stompconsumer.NewPublisher(ctx, stompconsumer.Config{Addresses: []string{cfg.Addr}})
				if err != nil {
					return err
				}
				defer p.Close()
				if err := p.Publish(ctx, "planted-"+randHex(8), out); err != nil {
					return err
				}
				return errors.New("planted: fails after publishing outside the transaction")
			}
			return ob.Send(ctx, tx, out)
		})
	} else {
		// B applies one delivery at a time, so the order it commits a
		// group's messages in is the order they arrived in.
		concurrency, prefetch = 1, 1
		fx := cfg.Prefix + "b_fx"
		handler = inbox.Handler(func(ctx context.Context, tx *sql.Tx, m *receiver.Message) error {
			var pos int64
			if err := tx.QueryRowContext(ctx, `SELECT coalesce(max(pos), 0) + 1 FROM `+fx).Scan(&pos); err != nil {
				return err
			}
			_, err := tx.ExecContext(ctx, q(cfg.Driver, `INSERT INTO `+fx+` (k, n, grp, seq, pos) VALUES (?, 1, ?, ?, ?)`+upsert(cfg.Driver, fx)),
				string(m.Body), m.Headers["x-group"], m.Headers["x-seq"], pos)
			return err
		})
	}
	log := slogStderr()
	pipeline := receiver.Config{Inbox: ib, Logger: log, Backoff: receiver.Backoff{Initial: 20 * time.Millisecond, Max: 200 * time.Millisecond}}
	var run func(context.Context) error
	switch cfg.Transport {
	case "stomp":
		c, err := stompconsumer.New(stompconsumer.Config{Addresses: []string{cfg.Addr}, Prefetch: prefetch, Concurrency: concurrency,
			Subscriptions:         []stompconsumer.Subscription{{Destination: map[string]string{"a": cfg.QueueA, "b": cfg.QueueB}[cfg.Role], Handler: handler}},
			DeadLetterDestination: cfg.DLQ, ShutdownTimeout: 5 * time.Second, Pipeline: pipeline, Outbox: ob})
		if err != nil {
			return err
		}
		run = c.Run
	case "amqp":
		c, err := rabbitconsumer.New(rabbitconsumer.Config{URL: cfg.Addr, Queue: map[string]string{"a": cfg.QueueA, "b": cfg.QueueB}[cfg.Role],
			Handler: handler, Prefetch: prefetch, Concurrency: concurrency, DeadLetterQueue: cfg.DLQ,
			ShutdownTimeout: 5 * time.Second, Pipeline: pipeline, Outbox: ob})
		if err != nil {
			return err
		}
		run = c.Run
	case "nats":
		c, err := natsconsumer.New(natsconsumer.Config{URL: cfg.Addr, Stream: map[string]string{"a": cfg.QueueA, "b": cfg.QueueB}[cfg.Role],
			Consumer: "chain", DeadLetterSubject: cfg.DLQ + "." + cfg.Role, Handler: handler, Concurrency: concurrency, InFlight: prefetch,
			AckWait: time.Second, ShutdownTimeout: 5 * time.Second, Pipeline: pipeline, Outbox: ob})
		if err != nil {
			return err
		}
		run = c.Run
	default:
		return fmt.Errorf("unknown transport %q", cfg.Transport)
	}
	return run(ctx)
}

// upsert counts a second application of a key in table instead of
// failing on it.
func upsert(driver, table string) string {
	if driver == "mysql" {
		return ` ON DUPLICATE KEY UPDATE n = n + 1`
	}
	return ` ON CONFLICT (k) DO UPDATE SET n = ` + table + `.n + 1`
}

func randHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// run is one chain run's parameters.
type run struct {
	transport, driver string
	n, kills          int
	plant             bool
}

// result is what a run's checks counted.
type result struct {
	lost, twiceA, twiceB, ghosts, order, left, pending int
}

func TestChain(t *testing.T) {
	if testing.Short() {
		t.Skip("kills processes for a minute")
	}
	for _, r := range []run{
		{"stomp", "pgx", 400, 16, false},
		{"amqp", "pgx", 400, 16, false},
		{"nats", "pgx", 400, 16, false},
		{"nats", "sqlite", 300, 16, false},
		{"stomp", "mysql", 300, 16, false},
	} {
		t.Run(r.transport+"-"+r.driver, func(t *testing.T) {
			if res := chain(t, r); res != (result{}) {
				t.Errorf("want every count 0: %+v", res)
			}
		})
	}
}

// TestChainCatchesPlantedFault: a consumer A that publishes outside its
// transaction and then fails makes B apply a message twice, and the
// checks say so.
func TestChainCatchesPlantedFault(t *testing.T) {
	if testing.Short() {
		t.Skip("kills processes")
	}
	res := chain(t, run{"stomp", "pgx", 40, 2, true})
	if res.twiceB == 0 {
		t.Errorf("the planted double send went unnoticed: %+v", res)
	}
}

func slogStderr() *slog.Logger {
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
}

// broker is the parent's view of the transport: it creates the
// destinations, fills A, and counts and removes what is left.
type broker interface {
	setup(ctx context.Context) error
	produce(ctx context.Context, keys []string) error
	left(ctx context.Context) (int, error) // messages left on A, B and the dead-letter destinations
	cleanup(ctx context.Context)
}

func chain(t *testing.T, r run) result {
	ctx := context.Background()
	prefix := "chain_" + randHex(4) + "_"
	cfg := config{Transport: r.transport, Driver: r.driver, Prefix: prefix, Plant: r.plant}
	var b broker
	switch r.transport {
	case "stomp":
		cfg.Addr = testenv.Getenv(t, "MSGAUDIT_STOMP_ADDR", "the chain test needs ActiveMQ")
		cfg.QueueA, cfg.QueueB, cfg.DLQ = "/queue/msgaudit."+prefix+"a", "/queue/msgaudit."+prefix+"b", "/queue/msgaudit."+prefix+"dlq"
		b = &stompBroker{cfg: &cfg}
	case "amqp":
		cfg.Addr = testenv.Getenv(t, "MSGAUDIT_AMQP_URL", "the chain test needs RabbitMQ")
		cfg.QueueA, cfg.QueueB, cfg.DLQ = "msgaudit."+prefix+"a", "msgaudit."+prefix+"b", "msgaudit."+prefix+"dlq"
		b = &amqpBroker{cfg: &cfg}
	case "nats":
		cfg.Addr = testenv.Getenv(t, "MSGAUDIT_NATS_URL", "the chain test needs NATS JetStream")
		cfg.QueueA, cfg.QueueB, cfg.DLQ = prefix+"a", prefix+"b", prefix+"dlq"
		b = &natsBroker{cfg: &cfg}
	}
	switch r.driver {
	case "pgx":
		cfg.DSNA = testenv.Getenv(t, "MSGAUDIT_POSTGRES_URL", "the chain test needs PostgreSQL")
		cfg.DSNB = cfg.DSNA
	case "mysql":
		raw := testenv.Getenv(t, "MSGAUDIT_MYSQL_URL", "the chain test needs MariaDB")
		rest, _ := strings.CutPrefix(raw, "mysql://")
		userinfo, hostdb, _ := strings.Cut(rest, "@")
		host, dbname, _ := strings.Cut(hostdb, "/")
		mc := mysql.NewConfig()
		mc.User, mc.Passwd, _ = strings.Cut(userinfo, ":")
		mc.Net, mc.Addr, mc.DBName = "tcp", host, dbname
		cfg.DSNA = mc.FormatDSN()
		cfg.DSNB = cfg.DSNA
	case "sqlite":
		dir := t.TempDir()
		lite := func(name string) string {
			return "file:" + filepath.Join(dir, name) + "?_txlock=immediate&_pragma=busy_timeout(20000)&_pragma=journal_mode(WAL)"
		}
		cfg.DSNA, cfg.DSNB = lite("a.db"), lite("b.db")
	}
	dbA, err := openDB(r.driver, cfg.DSNA)
	if err != nil {
		t.Fatal(err)
	}
	defer dbA.Close()
	dbB, err := openDB(r.driver, cfg.DSNB)
	if err != nil {
		t.Fatal(err)
	}
	defer dbB.Close()
	text := "TEXT"
	if r.driver == "mysql" {
		text = "VARBINARY(64)"
	}
	mustExec := func(db *sql.DB, s string, args ...any) {
		t.Helper()
		if _, err := db.ExecContext(ctx, q(r.driver, s), args...); err != nil {
			t.Fatalf("%s: %v", s, err)
		}
	}
	mustExec(dbA, `CREATE TABLE `+prefix+`a_fx (k `+text+` PRIMARY KEY, n INTEGER NOT NULL)`)
	mustExec(dbA, `CREATE TABLE `+prefix+`a_seq (g `+text+` PRIMARY KEY, n INTEGER NOT NULL)`)
	mustExec(dbB, `CREATE TABLE `+prefix+`b_fx (k `+text+` PRIMARY KEY, n INTEGER NOT NULL, grp `+text+`, seq INTEGER, pos BIGINT NOT NULL)`)
	t.Cleanup(func() {
		cctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		for _, tb := range []string{"a_fx", "a_seq", "a_in", "ob", "ob_keys"} {
			_, _ = dbA.ExecContext(cctx, `DROP TABLE IF EXISTS `+prefix+tb)
		}
		for _, tb := range []string{"b_fx", "b_in"} {
			_, _ = dbB.ExecContext(cctx, `DROP TABLE IF EXISTS `+prefix+tb)
		}
		b.cleanup(cctx)
	})
	keys := make([]string, r.n)
	for i := range keys {
		keys[i] = "k" + strconv.Itoa(i)
		mustExec(dbA, `INSERT INTO `+prefix+`a_fx (k, n) VALUES (?, 0)`, keys[i])
	}
	for g := range groups {
		mustExec(dbA, `INSERT INTO `+prefix+`a_seq (g, n) VALUES (?, 0)`, "g"+strconv.Itoa(g))
	}
	if err := b.setup(ctx); err != nil {
		t.Fatal(err)
	}
	if err := b.produce(ctx, keys); err != nil {
		t.Fatal(err)
	}

	start := func(role string) *exec.Cmd {
		c := cfg
		c.Role = role
		raw, _ := json.Marshal(c)
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), envConfig+"="+string(raw))
		cmd.Stderr = os.Stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		return cmd
	}
	procs := map[string]*exec.Cmd{"a": start("a"), "b": start("b")}
	defer func() {
		for _, p := range procs {
			_ = p.Process.Signal(syscall.SIGKILL)
			_ = p.Wait()
		}
	}()
	applied := func(db *sql.DB, table string) int {
		var n int
		_ = db.QueryRowContext(ctx, `SELECT count(*) FROM `+prefix+table+` WHERE n > 0`).Scan(&n)
		return n
	}
	kills := map[string]int{}
	rng := mrand.New(mrand.NewPCG(uint64(time.Now().UnixNano()), 7))
	for i := 0; i < r.kills; i++ {
		time.Sleep(time.Duration(200+rng.IntN(600)) * time.Millisecond)
		role := []string{"a", "b"}[rng.IntN(2)]
		p := procs[role]
		_ = p.Process.Signal(syscall.SIGKILL)
		_ = p.Wait()
		if ws, ok := p.ProcessState.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() {
			t.Fatalf("consumer %s exited before its kill: %v", role, p.ProcessState)
		}
		kills[role]++
		procs[role] = start(role)
	}
	deadline := time.Now().Add(3 * time.Minute)
	for applied(dbB, "b_fx") < r.n {
		if time.Now().After(deadline) {
			t.Fatalf("after the kills, B applied %d of %d messages in 3 minutes (A applied %d)", applied(dbB, "b_fx"), r.n, applied(dbA, "a_fx"))
		}
		time.Sleep(100 * time.Millisecond)
	}
	time.Sleep(time.Second) // a resend in flight would arrive now
	for role, p := range procs {
		_ = p.Process.Signal(syscall.SIGTERM)
		if err := p.Wait(); err != nil {
			t.Errorf("consumer %s did not stop cleanly on SIGTERM: %v", role, err)
		}
		delete(procs, role)
	}

	// The checks.
	aCount := map[string]int{}
	rows, err := dbA.QueryContext(ctx, `SELECT k, n FROM `+prefix+`a_fx`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var k string
		var n int
		_ = rows.Scan(&k, &n)
		aCount[k] = n
	}
	rows.Close()
	type bRow struct {
		k, grp string
		n, seq int
	}
	var bRows []bRow
	rows, err = dbB.QueryContext(ctx, `SELECT k, n, grp, seq FROM `+prefix+`b_fx ORDER BY pos`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var br bRow
		_ = rows.Scan(&br.k, &br.n, &br.grp, &br.seq)
		bRows = append(bRows, br)
	}
	rows.Close()
	lost, twiceA, twiceB, ghosts, order, bOrder := 0, 0, 0, 0, 0, 0
	inB := map[string]bool{}
	last := map[string]int{}
	var violations []string
	for _, br := range bRows {
		inB[br.k] = true
		if br.n > 1 {
			twiceB++
		}
		if aCount[br.k] == 0 {
			ghosts++
		}
		if br.seq != last[br.grp]+1 {
			bOrder++
			violations = append(violations, fmt.Sprintf("%s: %d after %d", br.grp, br.seq, last[br.grp]))
		}
		last[br.grp] = br.seq
	}
	order = bOrder
	if nb, ok := b.(*natsBroker); ok {
		// B applies a group's messages in the order they reach it; on
		// JetStream a message a killed B held comes back after AckWait,
		// behind its successors (the consumer's order, not the relay's).
		// The relay's order is the order B's stream stored them in.
		pub, err := nb.published(ctx)
		if err != nil {
			t.Fatal(err)
		}
		order = 0
		clear(last)
		for _, p := range pub {
			n, _ := strconv.Atoi(p[1])
			if n != last[p[0]]+1 {
				order++
				violations = append(violations, fmt.Sprintf("stream: %s: %d after %d", p[0], n, last[p[0]]))
			}
			last[p[0]] = n
		}
		if len(pub) != r.n {
			t.Errorf("B's stream holds %d messages, want %d (a resend stored twice?)", len(pub), r.n)
		}
		if bOrder > 0 {
			t.Logf("nats: B applied %d messages of a group out of the relay's order (redelivered after AckWait behind later ones)", bOrder)
		}
	}
	if len(violations) > 0 {
		t.Logf("order: %s", strings.Join(violations[:min(len(violations), 10)], "; "))
	}
	for _, k := range keys {
		if aCount[k] > 1 {
			twiceA++
		}
		if !inB[k] {
			lost++
		}
	}
	left, err := b.left(ctx)
	if err != nil {
		t.Error(err)
	}
	var pending int
	_ = dbA.QueryRowContext(ctx, `SELECT count(*) FROM `+prefix+`ob WHERE state <> 1`).Scan(&pending)
	t.Logf("%s/%s: %d messages, kills %v: lost %d, applied twice by A %d, by B %d, ghosts %d, order violations %d; left on the broker %d, outbox rows not sent %d",
		r.transport, r.driver, r.n, kills, lost, twiceA, twiceB, ghosts, order, left, pending)
	return result{lost: lost, twiceA: twiceA, twiceB: twiceB, ghosts: ghosts, order: order, left: left, pending: pending}
}
