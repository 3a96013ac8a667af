package inbox_test

import (
	"context"
	"database/sql"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/acemq/msgaudit/inbox"
	"github.com/acemq/msgaudit/internal/inboxsql"
)

// TestNewRejects: bad options and databases that do not fit them fail at
// New with ErrConfig, saying what is wrong.
func TestNewRejects(t *testing.T) {
	good := newSQLite(t)
	dir := t.TempDir()
	openRaw := func(dsn string) *sql.DB {
		db, err := sql.Open("sqlite", dsn)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = db.Close() })
		return db
	}
	cases := []struct {
		name string
		db   *sql.DB
		o    inbox.Options
		want string // in the error
	}{
		{"nil db", nil, inbox.Options{Dialect: inbox.SQLite}, "nil *sql.DB"},
		{"zero dialect", good.db, inbox.Options{}, "Dialect is required"},
		{"unknown dialect", good.db, inbox.Options{Dialect: 9}, "unknown dialect"},
		{"bad table", good.db, inbox.Options{Dialect: inbox.SQLite, Table: "x; DROP TABLE y"}, "invalid table name"},
		{"long table", good.db, inbox.Options{Dialect: inbox.SQLite, Table: strings.Repeat("t", 48)}, "invalid table name"},
		{"negative retention", good.db, inbox.Options{Dialect: inbox.SQLite, Retention: -1}, "negative Retention"},
		{"negative key length", good.db, inbox.Options{Dialect: inbox.SQLite, MaxKeyLength: -1}, "negative MaxKeyLength"},
		{"negative purge batch", good.db, inbox.Options{Dialect: inbox.SQLite, PurgeBatch: -1}, "negative PurgeBatch"},
		{"negative lanes", good.db, inbox.Options{Dialect: inbox.SQLite, Lanes: -1}, "negative Lanes"},
		{"negative max batch", good.db, inbox.Options{Dialect: inbox.SQLite, MaxBatch: -1}, "negative MaxBatch"},
		{"postgres batch over the subtransaction cache", good.db, inbox.Options{Dialect: inbox.PostgreSQL, MaxBatch: inboxsql.MaxPostgresBatch + 1}, "64 subtransactions"},
		{"negative linger", good.db, inbox.Options{Dialect: inbox.SQLite, Linger: -1}, "negative Linger"},
		{"sqlite read committed", good.db, inbox.Options{Dialect: inbox.SQLite, Isolation: sql.LevelReadCommitted}, "not supported on SQLite"},
		{"postgres snapshot", good.db, inbox.Options{Dialect: inbox.PostgreSQL, Isolation: sql.LevelSnapshot}, "not supported on PostgreSQL"},
		{"postgres dialect on sqlite", good.db, inbox.Options{Dialect: inbox.PostgreSQL}, "does not answer as postgresql"},
		{"no busy timeout", openRaw("file:" + filepath.Join(dir, "a.db") + "?_txlock=immediate"), inbox.Options{Dialect: inbox.SQLite}, "busy_timeout"},
		{"deferred transactions", openRaw("file:" + filepath.Join(dir, "b.db") + "?_pragma=busy_timeout(1000)"), inbox.Options{Dialect: inbox.SQLite}, "_txlock=immediate"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ib, err := inbox.New(context.Background(), c.db, c.o)
			if err == nil || !errors.Is(err, inbox.ErrConfig) || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("New = %v, %v; want an ErrConfig saying %q", ib, err, c.want)
			}
		})
	}
	// The DSN the documentation asks for passes, and New is idempotent.
	for range 2 {
		if _, err := inbox.New(context.Background(), good.db, inbox.Options{Dialect: inbox.SQLite, Table: good.table}); err != nil {
			t.Fatalf("New on a good DSN: %v", err)
		}
	}
}

// TestNewConcurrent: processes starting at once all create the table "if
// missing" on PostgreSQL, where concurrent CREATE ... IF NOT EXISTS can
// collide in the catalog; every New succeeds.
func TestNewConcurrent(t *testing.T) {
	b := newPostgres(t, false)
	table := b.table + "_c"
	t.Cleanup(func() { _, _ = b.open(t).Exec(`DROP TABLE IF EXISTS ` + table) })
	const n = 6
	errs := make(chan error, n)
	for range n {
		db := b.open(t)
		go func() {
			_, err := inbox.New(context.Background(), db, inbox.Options{Dialect: inbox.PostgreSQL, Table: table})
			errs <- err
		}()
	}
	for range n {
		select {
		case err := <-errs:
			if err != nil {
				t.Errorf("concurrent New: %v", err)
			}
		case <-time.After(60 * time.Second):
			t.Fatal("concurrent New calls did not return")
		}
	}
}

// TestLanes: the batching options' defaults, and how a consumer sizes
// the lanes: on SQLite one lane whatever the consumer runs; on PostgreSQL
// DefaultLanes until a consumer sizes them to its handlers, unless
// Options.Lanes is set.
func TestLanes(t *testing.T) {
	sq := newSQLite(t)
	ib := sq.newInbox(t, inbox.Options{})
	if ib.Lanes() != 1 || ib.MaxBatch() != inboxsql.DefaultMaxBatch || ib.Linger() != inboxsql.DefaultLinger {
		t.Errorf("sqlite defaults: lanes %d, max batch %d, linger %v; want 1, %d, %v", ib.Lanes(), ib.MaxBatch(), ib.Linger(), inboxsql.DefaultMaxBatch, inboxsql.DefaultLinger)
	}
	if n := ib.SizeLanes(8); n != 1 {
		t.Errorf("sqlite SizeLanes(8) = %d; want 1", n)
	}
	if n := sq.newInbox(t, inbox.Options{Lanes: 3}).SizeLanes(8); n != 3 {
		t.Errorf("sqlite with Lanes 3: SizeLanes(8) = %d; want 3", n)
	}
	pg := newPostgres(t, false)
	pib := pg.newInbox(t, inbox.Options{})
	if pib.Lanes() != inboxsql.DefaultLanes {
		t.Errorf("postgres lanes %d; want DefaultLanes %d", pib.Lanes(), inboxsql.DefaultLanes)
	}
	if n := pib.SizeLanes(7); n != 7 || pib.Lanes() != 7 {
		t.Errorf("postgres SizeLanes(7) = %d, Lanes %d; want 7", n, pib.Lanes())
	}
	if n := pg.newInbox(t, inbox.Options{Lanes: 2}).SizeLanes(7); n != 2 {
		t.Errorf("postgres with Lanes 2: SizeLanes(7) = %d; want 2", n)
	}
}
