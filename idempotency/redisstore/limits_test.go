package redisstore_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/acemq/msgaudit/idempotency"
	"github.com/acemq/msgaudit/idempotency/redisstore"
)

// TestRedisOptionBounds: the Redis store refuses, when it is built, a
// MaxKeyLength above MaxKeyLength and an empty key prefix (as the
// metadata store does), by constructor and by URL.
func TestRedisOptionBounds(t *testing.T) {
	ctx := context.Background()
	client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	defer client.Close()
	cases := []struct {
		name string
		open func() error
		ok   bool
	}{
		{"redis empty prefix", func() error { _, err := redisstore.New(client, "", idempotency.Options{}); return err }, false},
		{"redis URL empty prefix", func() error {
			_, err := redisstore.Open(ctx, "redis://127.0.0.1:1/0?max_retries=-1&msgaudit_prefix=", idempotency.Options{}, nil)
			if err != nil && !errors.Is(err, idempotency.ErrOptions) && strings.Contains(err.Error(), "refused") {
				return nil // it tried to connect: the prefix was accepted
			}
			return err
		}, false},
		{"redis MaxKeyLength at the bound", func() error {
			_, err := redisstore.New(client, "p:", idempotency.Options{MaxKeyLength: redisstore.MaxKeyLength})
			return err
		}, true},
		{"redis MaxKeyLength above the bound", func() error {
			_, err := redisstore.New(client, "p:", idempotency.Options{MaxKeyLength: redisstore.MaxKeyLength + 1})
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
