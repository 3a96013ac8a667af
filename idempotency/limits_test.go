package idempotency_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/acemq/msgaudit/idempotency"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"
)

// TestStoreOptionBounds: each backend refuses, when it is built, a
// MaxKeyLength above what it can index, and the Redis store refuses an
// empty key prefix (as the metadata store does), by constructor and by
// URL.
func TestStoreOptionBounds(t *testing.T) {
	ctx := context.Background()
	client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	defer client.Close()
	cases := []struct {
		name string
		open func() error
		ok   bool
	}{
		{"redis empty prefix", func() error { _, err := idempotency.NewRedis(client, "", idempotency.Options{}); return err }, false},
		{"redis URL empty prefix", func() error {
			_, err := idempotency.NewRedisURL(ctx, "redis://127.0.0.1:1/0?max_retries=-1&msgaudit_prefix=", idempotency.Options{}, nil)
			if err != nil && !errors.Is(err, idempotency.ErrOptions) && strings.Contains(err.Error(), "refused") {
				return nil // it tried to connect: the prefix was accepted
			}
			return err
		}, false},
		{"redis MaxKeyLength at the bound", func() error {
			_, err := idempotency.NewRedis(client, "p:", idempotency.Options{MaxKeyLength: idempotency.MaxRedisKeyLength})
			return err
		}, true},
		{"redis MaxKeyLength above the bound", func() error {
			_, err := idempotency.NewRedis(client, "p:", idempotency.Options{MaxKeyLength: idempotency.MaxRedisKeyLength + 1})
			return err
		}, false},
		{"postgres MaxKeyLength at the bound", func() error {
			_, err := idempotency.OpenPostgres(ctx, &pgxpool.Pool{}, "t", idempotency.Options{MaxKeyLength: idempotency.MaxPostgresKeyLength})
			return err
		}, true},
		{"postgres MaxKeyLength 10 KB", func() error {
			_, err := idempotency.OpenPostgres(ctx, &pgxpool.Pool{}, "t", idempotency.Options{MaxKeyLength: 10_000})
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

// TestPostgresLongestVerbatimKey stores keys of MaxPostgresKeyLength bytes
// verbatim (random letters, which compress badly) and a 10 KB key, which is
// hashed: both claim and confirm, so the bound fits the primary key index.
func TestPostgresLongestVerbatimKey(t *testing.T) {
	t.Parallel()
	p, _, _ := newPostgresTestStore(t, idempotency.Options{MaxKeyLength: idempotency.MaxPostgresKeyLength}, nil, 2)
	ctx := context.Background()
	letters := func(n int) string {
		b := make([]byte, n)
		for i := range b {
			b[i] = byte('!' + rand.IntN(94))
		}
		return string(b)
	}
	for _, id := range []string{letters(idempotency.MaxPostgresKeyLength - len("ns/")), letters(10_000)} {
		k := idempotency.Key{Namespace: "ns", ID: id}
		c, ok, err := p.Claim(ctx, k)
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
