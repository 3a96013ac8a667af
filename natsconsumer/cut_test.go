package natsconsumer

import (
	"context"
	"database/sql"
	"math/rand/v2"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/acemq/msgaudit/inbox"
	"github.com/acemq/msgaudit/internal/testkit/testenv"
	"github.com/acemq/msgaudit/internal/testkit/testwait"
	"github.com/acemq/msgaudit/receiver"
	_ "github.com/jackc/pgx/v5/stdlib"
	_ "modernc.org/sqlite"
)

// TestCutSQLiteInbox: 600 messages, two processes of one durable
// consumer on one SQLite database with the transactional inbox, 10%
// first-attempt handler failures, the connections cut three times
// through a TCP proxy while handlers run and one consumer restarted
// after the last cut. Every message's effect commits exactly once, none
// is lost, the consumer ends drained and nothing is dead-lettered.
func TestCutSQLiteInbox(t *testing.T) {
	dsn := "file:" + filepath.Join(t.TempDir(), "app.db") + "?_txlock=immediate&_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)"
	open := func() *sql.DB {
		db, err := sql.Open("sqlite", dsn)
		if err != nil {
			t.Fatal(err)
		}
		db.SetMaxOpenConns(8)
		t.Cleanup(func() { _ = db.Close() })
		return db
	}
	admin := open()
	if _, err := admin.Exec(`CREATE TABLE fx (body TEXT PRIMARY KEY, n INTEGER NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	cutTest(t, admin, `INSERT INTO fx (body, n) VALUES (?, 1) ON CONFLICT (body) DO UPDATE SET n = fx.n + 1`, "fx",
		func() receiver.Inbox {
			ib, err := inbox.New(context.Background(), open(), inbox.Options{Dialect: inbox.SQLite})
			if err != nil {
				t.Fatal(err)
			}
			return ib
		})
}

// TestCutPostgresInbox is TestCutSQLiteInbox with the inbox and the
// effect in PostgreSQL (MSGAUDIT_POSTGRES_URL), each process with a pool
// of its own.
func TestCutPostgresInbox(t *testing.T) {
	pgURL := testenv.Getenv(t, "MSGAUDIT_POSTGRES_URL", "PostgreSQL")
	suffix := randomName(t)
	table, fx := "msgaudit_nats_inbox_"+suffix, "msgaudit_nats_fx_"+suffix
	open := func() *sql.DB {
		db, err := sql.Open("pgx", pgURL)
		if err != nil {
			t.Fatal(err)
		}
		db.SetMaxOpenConns(6)
		t.Cleanup(func() { _ = db.Close() })
		return db
	}
	admin := open()
	t.Cleanup(func() {
		for _, tb := range []string{table, fx} {
			if _, err := admin.Exec(`DROP TABLE IF EXISTS ` + tb); err != nil {
				t.Errorf("cleanup: drop %s: %v", tb, err)
			}
		}
	})
	if _, err := admin.Exec(`CREATE TABLE ` + fx + ` (body text PRIMARY KEY, n int NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	cutTest(t, admin, `INSERT INTO `+fx+` (body, n) VALUES ($1, 1) ON CONFLICT (body) DO UPDATE SET n = `+fx+`.n + 1`, fx,
		func() receiver.Inbox {
			ib, err := inbox.New(context.Background(), open(), inbox.Options{Dialect: inbox.PostgreSQL, Table: table})
			if err != nil {
				t.Fatal(err)
			}
			return ib
		})
}

func cutTest(t *testing.T, admin *sql.DB, insert, fx string, newInbox func() receiver.Inbox) {
	e := newEnv(t, 0)
	const total = 600
	for i := range total {
		e.publish(strconv.Itoa(i), "")
	}
	var fails atomic.Int64
	var tried sync.Map
	handler := inbox.Handler(func(ctx context.Context, tx *sql.Tx, m *receiver.Message) error {
		if _, err := tx.ExecContext(ctx, insert, string(m.Body)); err != nil {
			return err
		}
		time.Sleep(time.Millisecond) // so that cuts catch handlers mid-run
		if _, again := tried.LoadOrStore(string(m.Body), true); !again && rand.IntN(10) == 0 {
			fails.Add(1)
			return errInjected
		}
		return nil
	})
	applied := func() (rows, most int) {
		if err := admin.QueryRow(`SELECT count(*), coalesce(max(n), 0) FROM `+fx).Scan(&rows, &most); err != nil {
			t.Fatal(err)
		}
		return rows, most
	}
	px := e.newProxy()
	newConsumer := func() *Consumer {
		cfg := e.config("nats://"+px.Addr(), handler)
		cfg.Concurrency, cfg.InFlight = 4, 8
		// Messages the server sent into a cut connection come back after
		// AckWait.
		cfg.AckWait = 2 * time.Second
		cfg.Heartbeat = time.Second
		cfg.ReconnectBackoff = receiver.Backoff{Initial: 10 * time.Millisecond, Max: 100 * time.Millisecond}
		cfg.Pipeline = receiver.Config{Inbox: newInbox(), MaxAttempts: 50,
			Backoff: receiver.Backoff{Initial: 5 * time.Millisecond, Max: 20 * time.Millisecond}}
		c, err := New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	cs := []*Consumer{newConsumer(), newConsumer()}
	stops := []func() error{start(t, cs[0]), start(t, cs[1])}
	for k, at := range []int{total / 4, total / 2, 3 * total / 4} {
		testwait.Until(t, 2*time.Minute, "messages applied before cut "+strconv.Itoa(k+1), func() bool {
			r, _ := applied()
			return r >= at
		})
		t.Logf("cut %d connections at %d applied", px.Cut(), at)
	}
	// The last cut is followed by a restart of one consumer.
	if err := stops[1](); err != nil {
		t.Fatalf("Run: %v", err)
	}
	cs = append(cs, newConsumer())
	stops = append(stops, start(t, cs[2]))
	testwait.Until(t, 3*time.Minute, "every message applied and the consumer drained", func() bool {
		r, _ := applied()
		return r == total && e.drained()
	})
	for _, stop := range stops {
		if err := stop(); err != nil {
			t.Errorf("Run: %v", err)
		}
	}
	if rows, most := applied(); rows != total || most != 1 {
		t.Errorf("%d messages applied, the most often %d times; want %d, each once", rows, most, total)
	}
	if dl := e.deadLetters(); len(dl) != 0 {
		t.Errorf("%d dead letters; want none", len(dl))
	}
	if fails.Load() == 0 {
		t.Error("no handler failure was injected")
	}
	var lost uint64
	for i, c := range cs {
		s, st := c.Metrics().Snapshot(), c.Stats()
		lost += st.Lost
		t.Logf("consumer %d: delivered %d processed %d duplicates %d retries %d lost %d dropped %d", i, s.Delivered, s.Processed, s.Duplicates(), s.Retries, st.Lost, st.Dropped)
	}
	if lost < 3 {
		t.Errorf("the consumers saw %d connection losses; want at least the 3 cuts", lost)
	}
}
