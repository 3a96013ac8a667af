package pgmeta_test

import (
	"context"
	"errors"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/acemq/msgaudit/internal/testkit/storetestkit"
	"github.com/acemq/msgaudit/internal/testkit/testenv"
	"github.com/acemq/msgaudit/internal/testkit/testwait"
	"github.com/acemq/msgaudit/metadata"
	"github.com/acemq/msgaudit/metadata/pgmeta"
	"github.com/acemq/msgaudit/metadata/storetest"
)

var (
	pgOnce sync.Once
	pgPool *pgxpool.Pool
	pgErr  error
)

// postgresPool returns one pool on MSGAUDIT_POSTGRES_URL shared by the
// package's tests (each test uses its own table), closed by TestMain. It
// skips the test when the variable is unset (failing under CI).
func postgresPool(t testing.TB) *pgxpool.Pool {
	t.Helper()
	u := testenv.Getenv(t, "MSGAUDIT_POSTGRES_URL", "the real service")
	pgOnce.Do(func() {
		cfg, err := pgxpool.ParseConfig(u)
		if err != nil {
			pgErr = err
			return
		}
		cfg.MaxConns = 8
		pgPool, pgErr = pgxpool.NewWithConfig(context.Background(), cfg)
	})
	if pgErr != nil {
		t.Fatal(pgErr)
	}
	return pgPool
}

func TestMain(m *testing.M) {
	code := m.Run()
	if pgPool != nil {
		pgPool.Close()
	}
	os.Exit(code)
}

// newTable creates a table of the test's own and drops it when the test
// ends.
func newTable(t testing.TB, pool *pgxpool.Pool) string {
	t.Helper()
	table := "mdtest_" + storetestkit.Hex(6)
	s, err := pgmeta.New(context.Background(), pool, pgmeta.Options{Table: table})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Migrate(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if _, err := pool.Exec(context.Background(), "DROP TABLE IF EXISTS "+table); err != nil {
			t.Errorf("cleanup: %v", err)
		}
	})
	return table
}

// TestConformance runs the metadata conformance suite on a table of its
// own; every reopen is a new Store that migrates again (idempotent).
func TestConformance(t *testing.T) {
	t.Parallel()
	pool := postgresPool(t)
	storetest.Run(t, func(t *testing.T) storetest.Opener {
		table := newTable(t, pool)
		return func(t *testing.T) metadata.Store {
			s, err := pgmeta.New(context.Background(), pool, pgmeta.Options{Table: table})
			if err != nil {
				t.Fatal(err)
			}
			if err := s.Migrate(context.Background()); err != nil { // idempotent
				t.Fatal(err)
			}
			return s
		}
	})
}

// TestNewArguments: a table name that is not a plain or schema-qualified
// identifier is refused at construction, before any I/O; valid ones are
// accepted.
func TestNewArguments(t *testing.T) {
	t.Parallel()
	if _, err := pgmeta.New(context.Background(), nil, pgmeta.Options{Table: "t"}); err == nil {
		t.Error("pgmeta.New(nil pool) succeeded")
	}
	for _, name := range []string{"1abc", "a.b.c", "a b", `a"b`, strings.Repeat("x", 64)} {
		if _, err := pgmeta.New(context.Background(), &pgxpool.Pool{}, pgmeta.Options{Table: name}); !errors.Is(err, metadata.ErrInvalidName) {
			t.Errorf("pgmeta.New(%q) = %v; want ErrInvalidName", name, err)
		}
	}
	for _, name := range []string{"", "t", "public.t", "_x9", strings.Repeat("x", 63)} { // "": the default table
		if _, err := pgmeta.New(context.Background(), &pgxpool.Pool{}, pgmeta.Options{Table: name}); err != nil {
			t.Errorf("pgmeta.New(%q) = %v", name, err)
		}
	}
}

// TestUnreachable: a store on a pool that cannot connect answers every
// operation with an error, never a result.
func TestUnreachable(t *testing.T) {
	t.Parallel()
	ctx := testwait.Context(t, time.Minute)
	cfg, err := pgxpool.ParseConfig("postgres://postgres@" + storetestkit.ClosedAddr(t) + "/test?sslmode=disable&connect_timeout=2")
	if err != nil {
		t.Fatal(err)
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	s, err := pgmeta.New(context.Background(), pool, pgmeta.Options{Table: "t"})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.Get(ctx, "k"); err == nil {
		t.Error("Get: no error")
	}
	if _, stored, err := s.PutIfAbsent(ctx, "k", "v"); err == nil || stored {
		t.Errorf("PutIfAbsent = %v, %v; want error, not stored", stored, err)
	}
	if ok, err := s.Replace(ctx, "k", "v", "w"); err == nil || ok {
		t.Errorf("Replace = %v, %v; want error", ok, err)
	}
}

func BenchmarkStore(b *testing.B) {
	pool := postgresPool(b)
	storetest.Bench(b, func(b *testing.B) metadata.Store {
		s, err := pgmeta.New(context.Background(), pool, pgmeta.Options{Table: newTable(b, pool)})
		if err != nil {
			b.Fatal(err)
		}
		return s
	})
}
