// Package redismeta is the Redis backend of package metadata (go-redis v9).
// Importing it registers the "redis" and "rediss" schemes with
// metadata.Open:
//
//	import _ "github.com/acemq/msgaudit/metadata/redismeta"
//
//	s, err := metadata.Open(ctx, "redis://127.0.0.1:6379/0?msgaudit_prefix=app:meta:")
//
// New uses a client the caller made (for TLS a URL cannot express).
package redismeta

import (
	"context"
	"fmt"

	"github.com/redis/go-redis/v9"

	"github.com/acemq/msgaudit/internal/metaurl"
	"github.com/acemq/msgaudit/metadata"
)

func init() {
	metadata.Register("redis", openRedisURL)
	metadata.Register("rediss", openRedisURL)
}

func openRedisURL(ctx context.Context, rawURL string) (metadata.StoreCloser, error) {
	if err := metaurl.CheckURL(rawURL); err != nil {
		return nil, err
	}
	prefix, rest, err := metaurl.CutParam(rawURL, metaurl.PrefixParam, DefaultPrefix)
	if err != nil {
		return nil, err
	}
	opt, err := redis.ParseURL(rest)
	if err != nil {
		// go-redis errors can quote the URL; report only the redacted one.
		return nil, fmt.Errorf("%w: %q: cannot parse Redis URL", metadata.ErrUnsupportedURL, metadata.RedactURL(rawURL))
	}
	client := redis.NewClient(opt)
	s, err := New(client, prefix)
	if err != nil {
		client.Close()
		return nil, err
	}
	s.owned = true
	if err := client.Ping(ctx).Err(); err != nil {
		client.Close()
		return nil, metaurl.RedactError(fmt.Errorf("metadata: redis %s: %w", metadata.RedactURL(rawURL), err), rawURL)
	}
	return s, nil
}

// check is metadata.CheckArgs.
func check(ctx context.Context, key string, values ...string) (string, error) {
	return metadata.CheckArgs(ctx, key, values...)
}
