package natsconsumer

import (
	"bytes"
	"context"
	"database/sql"
	"log/slog"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/acemq/msgaudit/inbox"
	"github.com/acemq/msgaudit/internal/testkit/pgrestart"
	"github.com/acemq/msgaudit/internal/testkit/testwait"
	"github.com/acemq/msgaudit/receiver"
)

// ledger is an effect table in a SQLite database of the test's own, and
// the inbox beside it: the handler adds one to a message body's row in
// the inbox's transaction, so a row's count is how often the message's
// effect committed.
type ledger struct {
	t  *testing.T
	db *sql.DB
	ib receiver.Inbox
}

func newLedger(t *testing.T) *ledger {
	t.Helper()
	dsn := "file:" + filepath.Join(t.TempDir(), "app.db") + "?_txlock=immediate&_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)"
	db, err := sql.Open("sqlite", dsn)
	if err != nil {
		t.Fatal(err)
	}
	db.SetMaxOpenConns(8)
	t.Cleanup(func() { _ = db.Close() })
	if _, err := db.Exec(`CREATE TABLE fx (body TEXT PRIMARY KEY, n INTEGER NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	ib, err := inbox.New(context.Background(), db, inbox.Options{Dialect: inbox.SQLite})
	if err != nil {
		t.Fatal(err)
	}
	return &ledger{t: t, db: db, ib: ib}
}

func (l *ledger) handler() receiver.Handler {
	return inbox.Handler(func(ctx context.Context, tx *sql.Tx, m *receiver.Message) error {
		_, err := tx.ExecContext(ctx, `INSERT INTO fx (body, n) VALUES (?, 1) ON CONFLICT (body) DO UPDATE SET n = fx.n + 1`, string(m.Body))
		return err
	})
}

// applied returns how many messages' effects committed and the largest
// number of times one did.
func (l *ledger) applied() (rows, most int) {
	l.t.Helper()
	if err := l.db.QueryRow(`SELECT count(*), coalesce(max(n), 0) FROM fx`).Scan(&rows, &most); err != nil {
		l.t.Fatal(err)
	}
	return rows, most
}

// consumer is a consumer of e's stream at url with the ledger's inbox,
// set to notice a dead server within seconds.
func (l *ledger) consumer(e *natsEnv, url string) *Consumer {
	cfg := e.config(url, l.handler())
	cfg.Concurrency, cfg.InFlight = 4, 16
	// What the server sent before it died comes back after AckWait.
	cfg.AckWait = 3 * time.Second
	cfg.Heartbeat = time.Second
	cfg.ReconnectBackoff = receiver.Backoff{Initial: 20 * time.Millisecond, Max: 200 * time.Millisecond}
	cfg.Pipeline = receiver.Config{Inbox: l.ib, MaxAttempts: 50,
		Backoff: receiver.Backoff{Initial: 5 * time.Millisecond, Max: 50 * time.Millisecond},
		Logger:  failLog(l.t)}
	return newConsumer(l.t, cfg)
}

// failLog is a logger whose lines the test prints only if it fails.
func failLog(t *testing.T) *slog.Logger {
	var mu sync.Mutex
	var buf bytes.Buffer
	t.Cleanup(func() {
		if t.Failed() {
			mu.Lock()
			defer mu.Unlock()
			t.Logf("the consumer's log:\n%s", buf.String())
		}
	})
	return slog.New(slog.NewTextHandler(writerFunc(func(p []byte) (int, error) {
		mu.Lock()
		defer mu.Unlock()
		return buf.Write(p)
	}), &slog.HandlerOptions{Level: slog.LevelDebug}))
}

type writerFunc func(p []byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

// check asserts the ledger: every one of total messages applied once,
// the consumer drained, nothing dead-lettered, and the stream still
// holding all total messages.
func (l *ledger) check(e *natsEnv, total int) {
	l.t.Helper()
	if rows, most := l.applied(); rows != total || most != 1 {
		l.t.Errorf("%d messages applied, the most often %d times; want %d, each once", rows, most, total)
	}
	if !e.drained() {
		l.t.Errorf("the consumer is not drained: %+v", e.info())
	}
	if dl := e.deadLetters(); len(dl) != 0 {
		l.t.Errorf("%d dead letters; want none", len(dl))
	}
	ctx := testwait.Context(l.t, testwait.Long)
	s, err := e.js.Stream(ctx, e.stream)
	if err != nil {
		l.t.Fatal(err)
	}
	if got := s.CachedInfo().State.Msgs; got != uint64(total) {
		l.t.Errorf("the stream holds %d messages; want the %d published", got, total)
	}
}

// nextAck waits until c has acknowledged more messages than it had when
// called, and returns when it saw that (within 5ms).
func nextAck(t *testing.T, c *Consumer, within time.Duration, what string) time.Time {
	t.Helper()
	n := c.Stats().Acks
	testwait.Until(t, within, what, func() bool { return c.Stats().Acks > n })
	return time.Now()
}

// TestRestartSQLiteInbox: a consumer with the inbox on SQLite runs over a
// stream of 1,000 messages (file storage) on the private nats-server of
// MSGAUDIT_NATS_RESTART_URL, which is killed with SIGKILL and started
// again on its store when a third of them is applied. Nothing is lost
// (the stream still holds every message and each is applied), nothing is
// applied twice, and the consumer ends drained. It logs the time from the
// kill to the first acknowledgement the consumer sends once reconnected.
func TestRestartSQLiteInbox(t *testing.T) {
	in := pgrestart.OpenNATS(t)
	e := newEnvOn(t, in.URL, 0, 1)
	const total = 1000
	for i := range total {
		e.publish(strconv.Itoa(i), "")
	}
	l := newLedger(t)
	c := l.consumer(e, in.URL)
	stop := start(t, c)
	testwait.Until(t, 2*time.Minute, "a third of the messages applied", func() bool {
		r, _ := l.applied()
		return r >= total/3
	})
	before, _ := l.applied()
	reconnects := c.Stats().Reconnects
	killed := time.Now()
	took, err := in.Restart(testwait.Context(t, 2*time.Minute), "immediate")
	if err != nil {
		t.Fatal(err)
	}
	testwait.Until(t, 2*time.Minute, "the consumer reconnected", func() bool { return c.Stats().Reconnects > reconnects })
	acked := nextAck(t, c, 2*time.Minute, "an acknowledgement after the reconnect")
	t.Logf("killed at %d applied; the server answered again %v after the kill, the first acknowledgement on the new connection came %v after the kill",
		before, took.Round(time.Millisecond), acked.Sub(killed).Round(time.Millisecond))
	testwait.Until(t, 3*time.Minute, "every message applied and the consumer drained", func() bool {
		r, _ := l.applied()
		return r == total && e.drained()
	})
	if err := stop(); err != nil {
		t.Errorf("Run: %v", err)
	}
	l.check(e, total)
	s, st := c.Metrics().Snapshot(), c.Stats()
	t.Logf("delivered %d processed %d duplicates %d retries %d lost %d reconnects %d ack errors %d",
		s.Delivered, s.Processed, s.Duplicates(), s.Retries, st.Lost, st.Reconnects, st.AckErrors)
	if st.Lost == 0 {
		t.Error("the consumer saw no connection loss; the server was not restarted under it")
	}
}
