package pgmeta_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/acemq/msgaudit/internal/testkit/storetestkit"
	"github.com/acemq/msgaudit/internal/testkit/testenv"
	"github.com/acemq/msgaudit/metadata"
	"github.com/acemq/msgaudit/metadata/pgmeta"
	"github.com/acemq/msgaudit/metadata/storetest"
)

// TestPoolerConformance runs the metadata suite through PgBouncer in
// transaction pooling mode (MSGAUDIT_PGBOUNCER_URL), with the URL
// parameter the documentation asks for there, default_query_exec_mode=exec:
// every statement may run on another server connection.
func TestPoolerConformance(t *testing.T) {
	t.Parallel()
	u := storetestkit.WithQuery(testenv.Getenv(t, "MSGAUDIT_PGBOUNCER_URL", "the pooler tests need PgBouncer in transaction mode"), "default_query_exec_mode=exec")
	cfg, err := pgxpool.ParseConfig(u)
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = 8
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	storetest.Run(t, func(t *testing.T) storetest.Opener {
		table := newTable(t, pool)
		return func(t *testing.T) metadata.Store {
			s, err := pgmeta.New(context.Background(), pool, pgmeta.Options{Table: table})
			if err != nil {
				t.Fatal(err)
			}
			return s
		}
	})
}
