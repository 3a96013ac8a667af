package pgmeta_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/acemq/msgaudit/internal/testkit/storetestkit"
	"github.com/acemq/msgaudit/internal/testkit/testenv"
	"github.com/acemq/msgaudit/metadata"
	"github.com/acemq/msgaudit/metadata/pgmeta"
)

// TestTempSchemaRefused: a table in a temporary schema would be a
// different table on every pooled connection (no shared state at all), so
// pgmeta.New and Open refuse it before any I/O; look-alike names that are
// ordinary schemas are accepted.
func TestTempSchemaRefused(t *testing.T) {
	for _, name := range []string{"pg_temp.x", "PG_TEMP.x", "pg_temp_3.x", "pg_toast_temp_12.x", "Pg_Temp_0.t"} {
		if _, err := pgmeta.New(context.Background(), &pgxpool.Pool{}, pgmeta.Options{Table: name}); !errors.Is(err, metadata.ErrInvalidName) {
			t.Errorf("pgmeta.New(%q) = %v; want ErrInvalidName", name, err)
		}
		if _, err := metadata.Open(context.Background(), "postgres://postgres@127.0.0.1:1/test?msgaudit_table="+name); !errors.Is(err, metadata.ErrInvalidName) {
			t.Errorf("Open(…msgaudit_table=%s) = %v; want ErrInvalidName", name, err)
		}
	}
	for _, name := range []string{"pg_temporary.x", "my_pg_temp.x", "pg_temp", "public.pg_temp"} {
		if _, err := pgmeta.New(context.Background(), &pgxpool.Pool{}, pgmeta.Options{Table: name}); err != nil {
			t.Errorf("pgmeta.New(%q) = %v", name, err)
		}
	}
}

// TestTempSchemaThroughSearchPath: a URL whose options put pg_temp first
// in search_path would make Migrate create the table in the session's
// temporary schema: values private to one connection that vanish with it.
// Open and New+Migrate refuse it with ErrInvalidName, for both URL forms,
// and leave no table behind; an unlogged table (emptied by crash
// recovery) is refused too, and accepted once made logged.
func TestTempSchemaThroughSearchPath(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	raw := testenv.Getenv(t, "MSGAUDIT_POSTGRES_URL", "the real service")
	pool := postgresPool(t)
	table := "mdtest_" + storetestkit.Hex(6)
	t.Cleanup(func() {
		if _, err := pool.Exec(context.Background(), "DROP TABLE IF EXISTS "+table); err != nil {
			t.Errorf("cleanup: %v", err)
		}
	})
	for _, opt := range []string{"options=-c%20search_path%3Dpg_temp", "options=-c%20search_path%3Dpg_temp%2Cpublic"} {
		t.Run(opt, func(t *testing.T) {
			u := storetestkit.WithQuery(raw, opt)
			s, err := metadata.Open(ctx, storetestkit.WithQuery(u, "msgaudit_table="+table))
			if err == nil {
				s.Close()
				t.Fatalf("Open with %s succeeded; want ErrInvalidName", opt)
			}
			if !errors.Is(err, metadata.ErrInvalidName) || !strings.Contains(err.Error(), "temporary schema") {
				t.Fatalf("Open with %s = %v; want ErrInvalidName naming the temporary schema", opt, err)
			}
			tp, err := pgxpool.New(ctx, u)
			if err != nil {
				t.Fatal(err)
			}
			defer tp.Close()
			ms, err := pgmeta.New(context.Background(), tp, pgmeta.Options{Table: table})
			if err != nil {
				t.Fatal(err)
			}
			if err := ms.Migrate(ctx); !errors.Is(err, metadata.ErrInvalidName) {
				t.Fatalf("Migrate with %s = %v; want ErrInvalidName", opt, err)
			}
		})
	}
	var n int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM pg_catalog.pg_class WHERE relname = $1`, table).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Fatalf("%d relations named %s left behind", n, table)
	}

	if _, err := pool.Exec(ctx, `CREATE UNLOGGED TABLE `+table+` (key bytea PRIMARY KEY, value bytea NOT NULL, updated_at timestamptz NOT NULL DEFAULT now())`); err != nil {
		t.Fatal(err)
	}
	u := storetestkit.WithQuery(raw, "msgaudit_table="+table)
	if s, err := metadata.Open(ctx, u); !errors.Is(err, metadata.ErrInvalidName) || !strings.Contains(fmt.Sprint(err), "unlogged") {
		if err == nil {
			s.Close()
		}
		t.Fatalf("Open on an unlogged table = %v; want ErrInvalidName naming it unlogged", err)
	}
	if _, err := pool.Exec(ctx, `ALTER TABLE `+table+` SET LOGGED`); err != nil {
		t.Fatal(err)
	}
	s, err := metadata.Open(ctx, u)
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
}
