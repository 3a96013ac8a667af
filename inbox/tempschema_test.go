package inbox_test

import (
	"context"
	"database/sql"
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/acemq/msgaudit/inbox"
	"github.com/acemq/msgaudit/internal/testkit/storetestkit"
	"github.com/acemq/msgaudit/internal/testkit/testenv"
)

// TestTempSchemaRefused: a table in a temporary schema holds keys private
// to one connection that vanish with it, so a redelivery on another
// connection, another consumer or after a crash is applied again. New
// refuses the temporary schema by name (pg_temp, pg_temp_N, their TOAST
// schemas; SQLite's temp) with ErrConfig; names that only look alike are
// ordinary schemas.
func TestTempSchemaRefused(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	sq := newSQLite(t)
	for _, c := range []struct {
		table   string
		dialect inbox.Dialect
	}{
		{"pg_temp.x", inbox.PostgreSQL}, {"PG_TEMP.x", inbox.PostgreSQL}, {"pg_temp_3.x", inbox.PostgreSQL},
		{"pg_toast_temp_12.x", inbox.PostgreSQL}, {"Pg_Temp_0.t", inbox.PostgreSQL},
		{"temp.x", inbox.SQLite}, {"TEMP.x", inbox.SQLite}, {"temporary.x", inbox.SQLite},
	} {
		// The name is refused before the database is asked anything, so
		// the SQLite handle serves for both dialects.
		_, err := inbox.New(ctx, sq.db, inbox.Options{Dialect: c.dialect, Table: c.table})
		if !errors.Is(err, inbox.ErrConfig) || !strings.Contains(err.Error(), "temporary schema") {
			t.Errorf("New(%v, %q) = %v; want ErrConfig naming the temporary schema", c.dialect, c.table, err)
		}
	}
}

// TestTempSchemaThroughSearchPath: a PostgreSQL URL whose options put
// pg_temp first in search_path would make New create the inbox table in
// the session's temporary schema. New refuses it with ErrConfig, for
// both URL forms, and leaves no table behind; an unlogged table (emptied
// by crash recovery, absent on standbys) is refused too, and accepted
// once made logged.
func TestTempSchemaThroughSearchPath(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	raw := testenv.Getenv(t, "MSGAUDIT_POSTGRES_URL", "the PostgreSQL inbox tests need a server")
	b := newPostgres(t, false)
	for _, opt := range []string{"options=-c%20search_path%3Dpg_temp", "options=-c%20search_path%3Dpg_temp%2Cpublic"} {
		t.Run(opt, func(t *testing.T) {
			db, err := sql.Open("pgx", storetestkit.WithQuery(raw, opt))
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			_, err = inbox.New(ctx, db, inbox.Options{Dialect: inbox.PostgreSQL, Table: b.table})
			if !errors.Is(err, inbox.ErrConfig) || !strings.Contains(err.Error(), "temporary schema") {
				t.Fatalf("New with %s = %v; want ErrConfig naming the temporary schema", opt, err)
			}
		})
	}
	var n int
	if err := b.db.QueryRowContext(ctx, `SELECT count(*) FROM pg_catalog.pg_class WHERE relname = $1`, b.table).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Fatalf("%d relations named %s left behind", n, b.table)
	}

	if _, err := b.db.ExecContext(ctx, `CREATE UNLOGGED TABLE `+b.table+` (namespace text NOT NULL, key text NOT NULL, recorded_at timestamptz NOT NULL DEFAULT now(), PRIMARY KEY (namespace, key))`); err != nil {
		t.Fatal(err)
	}
	_, err := inbox.New(ctx, b.db, inbox.Options{Dialect: inbox.PostgreSQL, Table: b.table})
	if !errors.Is(err, inbox.ErrConfig) || !strings.Contains(err.Error(), "unlogged") {
		t.Fatalf("New on an unlogged table = %v; want ErrConfig naming it unlogged", err)
	}
	if _, err := b.db.ExecContext(ctx, `ALTER TABLE `+b.table+` SET LOGGED`); err != nil {
		t.Fatal(err)
	}
	if _, err := inbox.New(ctx, b.db, inbox.Options{Dialect: inbox.PostgreSQL, Table: b.table}); err != nil {
		t.Fatal(err)
	}
}

// TestSQLiteTempTableNotCreated: the SQLite inbox does not reach a
// temporary table through its name: New with temp.NAME is refused and
// creates nothing in the file.
func TestSQLiteTempTableNotCreated(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "x.db")
	db, err := sql.Open("sqlite", sqliteDSN(path))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := inbox.New(context.Background(), db, inbox.Options{Dialect: inbox.SQLite, Table: "temp.inbox"}); !errors.Is(err, inbox.ErrConfig) {
		t.Fatalf("New(temp.inbox) = %v; want ErrConfig", err)
	}
}
