package pgstore_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/acemq/msgaudit/idempotency"
	"github.com/acemq/msgaudit/idempotency/pgstore"
)

// TestPostgresOptionBounds: the PostgreSQL store refuses, when it is
// built, a MaxKeyLength above what its primary key index can hold, an
// empty msgaudit_table in a URL, and a msgaudit_table that disagrees with
// Options.Table.
func TestPostgresOptionBounds(t *testing.T) {
	ctx := context.Background()
	pool := idlePool(t)
	cases := []struct {
		name string
		open func() error
		ok   bool
	}{
		{"postgres MaxKeyLength at the bound", func() error {
			_, err := pgstore.New(ctx, pool, pgstore.Options{Options: idempotency.Options{MaxKeyLength: pgstore.MaxKeyLength}, Table: "t"})
			return err
		}, true},
		{"postgres MaxKeyLength 10 KB", func() error {
			_, err := pgstore.New(ctx, pool, pgstore.Options{Options: idempotency.Options{MaxKeyLength: 10_000}, Table: "t"})
			return err
		}, false},
		{"postgres URL with an empty table", func() error {
			_, err := pgstore.Open(ctx, "postgres://127.0.0.1:1/none?sslmode=disable&msgaudit_table=", pgstore.Options{})
			return err
		}, false},
		{"postgres URL table disagrees with Options.Table", func() error {
			_, err := pgstore.Open(ctx, "postgres://127.0.0.1:1/none?sslmode=disable&msgaudit_table=a", pgstore.Options{Table: "b"})
			return err
		}, false},
	}
	for _, c := range cases {
		err := c.open()
		if c.ok != (err == nil) || (err != nil && !errors.Is(err, idempotency.ErrOptions)) {
			t.Errorf("%s: %v, want ok=%v (or ErrOptions)", c.name, err, c.ok)
		}
	}
}

// TestPostgresLongestVerbatimKey stores keys of MaxKeyLength bytes
// verbatim (random letters, which compress badly) and a 10 KB key, which is
// hashed: both claim and confirm, so the bound fits the primary key index.
func TestPostgresLongestVerbatimKey(t *testing.T) {
	t.Parallel()
	p, _, _ := newPostgresTestStore(t, idempotency.Options{MaxKeyLength: pgstore.MaxKeyLength}, nil, 2)
	ctx := context.Background()
	letters := func(n int) string {
		b := make([]byte, n)
		for i := range b {
			b[i] = byte('!' + rand.IntN(94))
		}
		return string(b)
	}
	for _, id := range []string{letters(pgstore.MaxKeyLength - len("ns/")), letters(10_000)} {
		k := idempotency.Key{Namespace: "ns", ID: id}
		c, ok, err := pgstore.Claim(ctx, p, k)
		if err != nil || !ok {
			t.Fatalf("Claim of a %d-byte key: %v, %v", len(id), ok, err)
		}
		if err := p.Confirm(ctx, c); err != nil {
			t.Fatalf("Confirm of a %d-byte key: %v", len(id), err)
		}
		if ok, err := p.IsConfirmed(ctx, k); err != nil || !ok {
			t.Fatalf("IsConfirmed of a %d-byte key: %v, %v", len(id), ok, err)
		}
	}
}

// idlePool returns a pool that never connects (port 1, and nothing asks it
// for a connection), for tests of what New refuses: New does no I/O.
func idlePool(t *testing.T) *pgxpool.Pool {
	t.Helper()
	pool, err := pgxpool.New(context.Background(), "postgres://127.0.0.1:1/none?sslmode=disable")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}
