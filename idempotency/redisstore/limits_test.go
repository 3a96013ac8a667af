package redisstore_test

import (
	"context"
	"crypto/tls"
	"errors"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/acemq/msgaudit/idempotency"
	"github.com/acemq/msgaudit/idempotency/redisstore"
)

// TestRedisOptionBounds: the Redis store refuses, when it is built, a
// MaxKeyLength above MaxKeyLength, an empty msgaudit_prefix in a URL, a
// msgaudit_prefix that disagrees with Options.Prefix, and Options.TLS
// given to New (whose client already has its TLS); an empty
// Options.Prefix means the default prefix.
func TestRedisOptionBounds(t *testing.T) {
	ctx := context.Background()
	client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	defer client.Close()
	cases := []struct {
		name string
		open func() error
		ok   bool
	}{
		{"redis empty prefix means the default", func() error { _, err := redisstore.New(ctx, client, redisstore.Options{Prefix: ""}); return err }, true},
		{"redis TLS on New", func() error {
			_, err := redisstore.New(ctx, client, redisstore.Options{Prefix: "p:", TLS: &tls.Config{MinVersion: tls.VersionTLS12}})
			return err
		}, false},
		{"redis URL prefix disagrees with Options.Prefix", func() error {
			_, err := redisstore.Open(ctx, "redis://127.0.0.1:1/0?max_retries=-1&msgaudit_prefix=a:", redisstore.Options{Prefix: "b:"})
			return err
		}, false},
		{"redis URL prefix agrees with Options.Prefix", func() error {
			_, err := redisstore.Open(ctx, "redis://127.0.0.1:1/0?max_retries=-1&msgaudit_prefix=a:", redisstore.Options{Prefix: "a:"})
			if err != nil && !errors.Is(err, idempotency.ErrOptions) && strings.Contains(err.Error(), "refused") {
				return nil // it tried to connect: the prefix was accepted
			}
			return err
		}, true},
		{"redis URL empty prefix", func() error {
			_, err := redisstore.Open(ctx, "redis://127.0.0.1:1/0?max_retries=-1&msgaudit_prefix=", redisstore.Options{})
			if err != nil && !errors.Is(err, idempotency.ErrOptions) && strings.Contains(err.Error(), "refused") {
				return nil // it tried to connect: the prefix was accepted
			}
			return err
		}, false},
		{"redis MaxKeyLength at the bound", func() error {
			_, err := redisstore.New(ctx, client, redisstore.Options{Options: idempotency.Options{MaxKeyLength: redisstore.MaxKeyLength}, Prefix: "p:"})
			return err
		}, true},
		{"redis MaxKeyLength above the bound", func() error {
			_, err := redisstore.New(ctx, client, redisstore.Options{Options: idempotency.Options{MaxKeyLength: redisstore.MaxKeyLength + 1}, Prefix: "p:"})
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
