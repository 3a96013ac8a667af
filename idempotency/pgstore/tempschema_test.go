package pgstore_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/acemq/msgaudit/idempotency/pgstore"
	"github.com/acemq/msgaudit/internal/testkit/storetestkit"
	"github.com/acemq/msgaudit/internal/testkit/testwait"
)

// TestPostgresTempSchemaRefused: a table in a temporary schema would be a
// different table on every pooled connection, so two stores (or two
// connections of one) would both claim a key. New and
// Open refuse it before any I/O; look-alike names that are
// ordinary schemas are accepted.
func TestPostgresTempSchemaRefused(t *testing.T) {
	ctx := context.Background()
	for _, name := range []string{"pg_temp.x", "PG_TEMP.x", "pg_temp_3.x", "pg_toast_temp_12.x", "Pg_Temp_0.t"} {
		_, err := pgstore.New(ctx, idlePool(t), pgstore.Options{Table: name})
		if err == nil || !strings.Contains(err.Error(), "temporary schema") {
			t.Errorf("New(%q) = %v; want a temporary-schema error", name, err)
		}
		_, err = pgstore.Open(ctx, "postgres://postgres@127.0.0.1:1/test?msgaudit_table="+name, pgstore.Options{})
		if err == nil || !strings.Contains(err.Error(), "temporary schema") {
			t.Errorf("Open(…msgaudit_table=%s) = %v; want a temporary-schema error", name, err)
		}
	}
	for _, name := range []string{"pg_temporary.x", "my_pg_temp.x", "pg_temp", "public.pg_temp"} {
		if _, err := pgstore.New(ctx, idlePool(t), pgstore.Options{Table: name}); err != nil {
			t.Errorf("New(%q) = %v", name, err)
		}
	}
}

// searchPathOptions are URL query parameters that make pg_temp the first
// schema of every connection's search_path, so that an unqualified table
// name is created in the session's temporary schema.
var searchPathOptions = []string{
	"options=-c%20search_path%3Dpg_temp",
	"options=-c%20search_path%3Dpg_temp%2Cpublic",
}

// TestPostgresTempSchemaThroughSearchPath: a URL whose options put pg_temp
// first in search_path would make Migrate create the table in the
// session's temporary schema: keys private to one connection that vanish
// with it, so a redelivery on another connection or after a crash is
// applied again. Open and Migrate refuse it, for both URL forms, and leave
// no table behind. An unlogged table (emptied by crash recovery) is
// refused too.
func TestPostgresTempSchemaThroughSearchPath(t *testing.T) {
	t.Parallel()
	ctx := testwait.Context(t, time.Minute)
	pool, table := postgresTestPool(t, nil, 0)
	raw := postgresTestURL(t)
	for _, opt := range searchPathOptions {
		t.Run(opt, func(t *testing.T) { refusedThroughSearchPath(ctx, t, raw, opt, table) })
	}
	var n int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM pg_catalog.pg_class WHERE relname = $1`, table).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Fatalf("%d relations named %s left behind", n, table)
	}

	// An unlogged table of the store's layout.
	if _, err := pool.Exec(ctx, `CREATE UNLOGGED TABLE `+pgx.Identifier{table}.Sanitize()+` (key text PRIMARY KEY, state text NOT NULL, owner text, expires_at timestamptz NOT NULL, updated_at timestamptz NOT NULL DEFAULT now())`); err != nil {
		t.Fatal(err)
	}
	s, err := pgstore.Open(ctx, storetestkit.WithQuery(raw, "msgaudit_table="+table), pgstore.Options{})
	if err == nil {
		_ = s.Close()
		t.Fatal("Open on an unlogged table succeeded")
	}
	if !strings.Contains(err.Error(), "unlogged") {
		t.Fatalf("Open on an unlogged table = %v; want an unlogged-table error", err)
	}
	// Made logged, the same table is accepted.
	if _, err := pool.Exec(ctx, `ALTER TABLE `+pgx.Identifier{table}.Sanitize()+` SET LOGGED`); err != nil {
		t.Fatal(err)
	}
	s, err = pgstore.Open(ctx, storetestkit.WithQuery(raw, "msgaudit_table="+table), pgstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	_ = s.Close()
}

// refusedThroughSearchPath checks that Open and New+Migrate refuse table
// on a URL with the query parameter opt.
func refusedThroughSearchPath(ctx context.Context, t *testing.T, raw, opt, table string) {
	t.Helper()
	u := storetestkit.WithQuery(raw, opt)
	s, err := pgstore.Open(ctx, storetestkit.WithQuery(u, "msgaudit_table="+table), pgstore.Options{})
	if err == nil {
		_ = s.Close()
		t.Fatalf("Open with %s succeeded; want a temporary-schema error", opt)
	}
	if !strings.Contains(err.Error(), "temporary schema") {
		t.Fatalf("Open with %s = %v; want a temporary-schema error", opt, err)
	}

	cfg, err := pgxpool.ParseConfig(u)
	if err != nil {
		t.Fatal(err)
	}
	tp, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	s, err = pgstore.New(ctx, tp, pgstore.Options{Table: table})
	if err != nil {
		t.Fatal(err)
	}
	err = s.Migrate(ctx)
	tp.Close()
	if err == nil || !strings.Contains(err.Error(), "temporary schema") {
		t.Fatalf("Migrate with %s = %v; want a temporary-schema error", opt, err)
	}
}
