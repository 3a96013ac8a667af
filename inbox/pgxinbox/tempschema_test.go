package pgxinbox_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/acemq/msgaudit/inbox"
	"github.com/acemq/msgaudit/inbox/pgxinbox"
	"github.com/acemq/msgaudit/internal/testkit/storetestkit"
	"github.com/acemq/msgaudit/internal/testkit/testenv"
)

// TestTempSchemaRefused: a table in a temporary schema holds keys private
// to one connection that vanish with it, so a redelivery on another
// connection, another consumer or after a crash is applied again. New
// refuses pg_temp names with ErrConfig, and a URL whose options put
// pg_temp first in search_path (both forms), leaving no table behind; an
// unlogged table (emptied by crash recovery, absent on standbys) is
// refused too, and accepted once made logged.
func TestTempSchemaRefused(t *testing.T) {
	ctx := context.Background()
	raw := testenv.Getenv(t, "MSGAUDIT_POSTGRES_URL", "the pgxinbox tests need a PostgreSQL server")
	f := newFixture(t, 0)
	for _, name := range []string{"pg_temp.x", "PG_TEMP.x", "pg_temp_3.x", "pg_toast_temp_12.x"} {
		if _, err := pgxinbox.New(ctx, f.pool, inbox.Options{Table: name}); !errors.Is(err, inbox.ErrConfig) || !strings.Contains(err.Error(), "temporary schema") {
			t.Errorf("New(%q) = %v; want ErrConfig naming the temporary schema", name, err)
		}
	}
	table := f.table + "_t"
	t.Cleanup(func() { _, _ = f.pool.Exec(context.Background(), `DROP TABLE IF EXISTS `+table) })
	for _, opt := range []string{"options=-c%20search_path%3Dpg_temp", "options=-c%20search_path%3Dpg_temp%2Cpublic"} {
		t.Run(opt, func(t *testing.T) {
			pool, err := pgxpool.New(ctx, storetestkit.WithQuery(raw, opt))
			if err != nil {
				t.Fatal(err)
			}
			defer pool.Close()
			_, err = pgxinbox.New(ctx, pool, inbox.Options{Table: table})
			if !errors.Is(err, inbox.ErrConfig) || !strings.Contains(err.Error(), "temporary schema") {
				t.Fatalf("New with %s = %v; want ErrConfig naming the temporary schema", opt, err)
			}
		})
	}
	var n int
	if err := f.pool.QueryRow(ctx, `SELECT count(*) FROM pg_catalog.pg_class WHERE relname = $1`, table).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Fatalf("%d relations named %s left behind", n, table)
	}

	if _, err := f.pool.Exec(ctx, `CREATE UNLOGGED TABLE `+table+` (namespace text NOT NULL, key text NOT NULL, recorded_at timestamptz NOT NULL DEFAULT now(), PRIMARY KEY (namespace, key))`); err != nil {
		t.Fatal(err)
	}
	if _, err := pgxinbox.New(ctx, f.pool, inbox.Options{Table: table}); !errors.Is(err, inbox.ErrConfig) || !strings.Contains(err.Error(), "unlogged") {
		t.Fatalf("New on an unlogged table = %v; want ErrConfig naming it unlogged", err)
	}
	if _, err := f.pool.Exec(ctx, `ALTER TABLE `+table+` SET LOGGED`); err != nil {
		t.Fatal(err)
	}
	if _, err := pgxinbox.New(ctx, f.pool, inbox.Options{Table: table}); err != nil {
		t.Fatal(err)
	}
}
