package mysqlstore_test

import (
	"context"
	"database/sql"
	"errors"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/acemq/msgaudit/idempotency"
	"github.com/acemq/msgaudit/idempotency/mysqlstore"
	"github.com/acemq/msgaudit/internal/testkit/storetestkit"
)

// TestMySQLHungServer: against a server that accepts connections and
// never answers, every call ends when its context does, with an error
// matching context.DeadlineExceeded, never hanging and never a verdict.
func TestMySQLHungServer(t *testing.T) {
	t.Parallel()
	addr := storetestkit.SilentServer(t)
	cfg := mysql.NewConfig()
	cfg.User, cfg.Net, cfg.Addr, cfg.DBName = "root", "tcp", addr, "test"
	conn, err := mysql.NewConnector(cfg)
	if err != nil {
		t.Fatal(err)
	}
	db := sql.OpenDB(conn)
	t.Cleanup(func() { _ = db.Close() })
	s, err := mysqlstore.New(context.Background(), db, mysqlstore.Options{Table: "t"})
	if err != nil {
		t.Fatal(err)
	}
	key := idempotency.Key{Namespace: "n", ID: "1"}
	c := idempotency.Claim{Key: key, Token: "t"}
	ops := map[string]func(ctx context.Context) error{
		"TryClaim":    func(ctx context.Context) error { _, _, err := s.TryClaim(ctx, key); return err },
		"IsConfirmed": func(ctx context.Context) error { _, err := s.IsConfirmed(ctx, key); return err },
		"Confirm":     func(ctx context.Context) error { return s.Confirm(ctx, c) },
		"Release":     func(ctx context.Context) error { return s.Release(ctx, c) },
		"Renew":       func(ctx context.Context) error { _, err := s.Renew(ctx, c); return err },
		"TryClaimBatch": func(ctx context.Context) error {
			return s.TryClaimBatch(ctx, []idempotency.Key{key}, make([]idempotency.ClaimResult, 1))
		},
		"ConfirmBatch": func(ctx context.Context) error { return s.ConfirmBatch(ctx, []idempotency.Claim{c}, make([]error, 1)) },
		"ReleaseBatch": func(ctx context.Context) error { return s.ReleaseBatch(ctx, []idempotency.Claim{c}, make([]error, 1)) },
		"Purge":        func(ctx context.Context) error { _, err := s.Purge(ctx, 10); return err },
		"Backlog":      func(ctx context.Context) error { _, err := s.Backlog(ctx); return err },
		"Migrate":      func(ctx context.Context) error { return s.Migrate(ctx) },
		"mysqlstore.Open": func(ctx context.Context) error {
			_, err := mysqlstore.Open(ctx, "mysql://root:pw@"+addr+"/test", mysqlstore.Options{})
			return err
		},
	}
	for name, op := range ops {
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		err := op(ctx)
		cancel()
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("%s on a hung server: %v, want an error matching context.DeadlineExceeded", name, err)
		}
	}
}
