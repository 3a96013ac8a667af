package pgstore_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/acemq/msgaudit/idempotency"
	"github.com/acemq/msgaudit/idempotency/pgstore"
	"github.com/acemq/msgaudit/idempotency/storetest"
	"github.com/acemq/msgaudit/internal/testkit/storetestkit"
	"github.com/acemq/msgaudit/internal/testkit/testenv"
	"github.com/acemq/msgaudit/internal/testkit/testwait"
)

// poolerURL returns MSGAUDIT_PGBOUNCER_URL (PgBouncer in transaction
// pooling mode in front of the test PostgreSQL) with the query parameters
// given appended.
func poolerURL(t testing.TB, params ...string) string {
	t.Helper()
	u := testenv.Getenv(t, "MSGAUDIT_PGBOUNCER_URL", "the pooler tests need PgBouncer in transaction mode")
	for _, p := range params {
		u = storetestkit.WithQuery(u, p)
	}
	return u
}

// TestPostgresPoolerConformance runs the store suite (the batch methods
// with it) through PgBouncer in transaction pooling mode, with pgx's
// unnamed-statement mode the documentation asks for there:
// default_query_exec_mode=exec in the URL.
func TestPostgresPoolerConformance(t *testing.T) {
	raw := poolerURL(t, "default_query_exec_mode=exec")
	var tables sync.Map // *pgstore.Store → its table
	open := func(t *testing.T, o idempotency.Options) idempotency.Store {
		table := "msgaudit_pooler_" + storetestkit.Hex(8)
		s, err := pgstore.Open(testwait.Context(t, time.Minute), storetestkit.WithQuery(raw, "msgaudit_table="+table), pgstore.Options{Options: o})
		if err != nil {
			t.Fatalf("Open through the pooler: %v", err)
		}
		tables.Store(s, table)
		t.Cleanup(func() {
			_ = s.Close()
			dropTable(t, raw, table)
		})
		return s
	}
	storetest.Run(t, open, storetest.Capabilities{
		ServerTime: true,
		Reopen: func(t *testing.T, old idempotency.Store, o idempotency.Options) idempotency.Store {
			table, ok := tables.Load(old)
			if !ok {
				t.Fatalf("Reopen of a store the test did not open: %T", old)
			}
			s, err := pgstore.Open(testwait.Context(t, time.Minute), storetestkit.WithQuery(raw, "msgaudit_table="+table.(string)), pgstore.Options{Options: o})
			if err != nil {
				t.Fatalf("reopen: %v", err)
			}
			return s
		},
	})
}

// dropTable drops table through a connection of its own.
func dropTable(t testing.TB, rawURL, table string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	pool, err := pgxpool.New(ctx, rawURL)
	if err != nil {
		t.Errorf("cleanup: connect: %v", err)
		return
	}
	defer pool.Close()
	// No arguments: the simple protocol, whatever the URL's mode.
	if _, err := pool.Exec(ctx, `DROP TABLE IF EXISTS `+pgx.Identifier{table}.Sanitize()); err != nil {
		t.Errorf("cleanup: drop %s: %v", table, err)
	}
}

// TestPostgresPoolerDefaultModeFails pins down why the URL parameter is
// needed: with pgx's default mode (named prepared statements cached per
// client connection), PgBouncer 1.18 in transaction mode runs a statement
// prepared through a client connection on a server connection that never
// saw it. The store answers with an error, never with a verdict, and the
// error names the fix.
func TestPostgresPoolerDefaultModeFails(t *testing.T) {
	raw := poolerURL(t)
	ctx := testwait.Context(t, time.Minute)
	table := "msgaudit_pooler_" + storetestkit.Hex(8)
	// The store has one client connection; other holds a transaction, and
	// with it the server connection the store used last (PgBouncer lends
	// the most recently used idle one), so the store's next statement runs
	// on another server connection, where its cached name was never
	// prepared.
	t.Cleanup(func() { dropTable(t, raw, table) })
	// Open itself can fail so: the server connection PgBouncer lends its
	// migration may hold the same cached name, prepared by another client
	// before.
	s, failed := pgstore.Open(ctx, storetestkit.WithQuery(raw, "pool_max_conns=1&msgaudit_table="+table), pgstore.Options{})
	if failed == nil {
		t.Cleanup(func() { _ = s.Close() })
	}
	other, err := pgx.Connect(ctx, raw)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close(ctx)
	for round := 0; round < 20 && failed == nil; round++ {
		out, _, err := s.TryClaim(ctx, idempotency.Key{Namespace: "pooler", ID: storetestkit.Hex(8)})
		if err == nil && out != idempotency.Claimed {
			t.Fatalf("TryClaim of a new key = %v", out)
		}
		failed = err
		if failed != nil {
			break
		}
		// No arguments: pgx sends these with the simple protocol, so other
		// prepares nothing itself.
		if _, err := other.Exec(ctx, "BEGIN"); err != nil {
			t.Fatal(err)
		}
		if _, err := other.Exec(ctx, "SELECT 1"); err != nil {
			t.Fatal(err)
		}
		out, _, failed = s.TryClaim(ctx, idempotency.Key{Namespace: "pooler", ID: storetestkit.Hex(8)})
		if failed == nil && out != idempotency.Claimed {
			t.Fatalf("TryClaim of a new key = %v", out)
		}
		if _, err := other.Exec(ctx, "COMMIT"); err != nil {
			t.Fatal(err)
		}
	}
	if failed == nil {
		t.Fatal("20 rounds through the pooler in pgx's default mode never failed: does PgBouncer track prepared statements now (1.21+ with max_prepared_statements)? Then the documentation's advice is out of date")
	}
	if !strings.Contains(failed.Error(), "stmtcache_") || !strings.Contains(failed.Error(), "default_query_exec_mode=exec") {
		t.Errorf("the failure is not about pgx's cached statements, or does not name the fix: %v", failed)
	}
	t.Logf("default mode through the pooler: %v", failed)
}
