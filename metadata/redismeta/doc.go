// Package redismeta is the Redis backend of package metadata (go-redis v9).
// Importing it registers the "redis" and "rediss" schemes (one server),
// "redis+cluster" and "rediss+cluster" (Redis Cluster) and
// "redis+sentinel" and "rediss+sentinel" (a master found through Redis
// Sentinel) with metadata.Open:
//
//	import _ "github.com/acemq/msgaudit/metadata/redismeta"
//
//	s, err := metadata.Open(ctx, "redis://127.0.0.1:6379/0?msgaudit_prefix=app:meta:")
//	s, err = metadata.Open(ctx, "redis+cluster://10.0.0.1:6379,10.0.0.2:6379?msgaudit_prefix=app:meta:")
//	s, err = metadata.Open(ctx, "redis+sentinel://10.0.0.1:26379,10.0.0.2:26379/mymaster/0")
//
// The Cluster and Sentinel forms are those of idempotency/redisstore: seed
// nodes or Sentinels comma-separated in the host part, the Sentinel master
// name as the path, the URL's password for the data nodes and
// sentinel_password for Sentinels that require one. Every script touches
// one key, so the key layout (prefix + key) is the same on one server and
// on a cluster, with no hash tags.
//
// New uses a client the caller made (for TLS a URL cannot express).
package redismeta

import (
	"context"
	"fmt"

	"github.com/acemq/msgaudit/internal/metaurl"
	"github.com/acemq/msgaudit/internal/redact"
	"github.com/acemq/msgaudit/internal/redisconn"
	"github.com/acemq/msgaudit/metadata"
)

func init() {
	for _, scheme := range []string{"redis", "rediss", "redis+cluster", "rediss+cluster", "redis+sentinel", "rediss+sentinel"} {
		metadata.Register(scheme, openRedisURL)
	}
}

func openRedisURL(ctx context.Context, rawURL string) (metadata.StoreCloser, error) {
	if err := metaurl.CheckURL(redisconn.OneHost(rawURL)); err != nil {
		return nil, err
	}
	prefix, rest, err := metaurl.CutParam(rawURL, metaurl.PrefixParam, defaultPrefix)
	if err != nil {
		return nil, err
	}
	cfg, err := redisconn.Parse(rest)
	if err != nil {
		// go-redis errors can quote the URL: every secret of it is masked.
		return nil, metaurl.RedactError(fmt.Errorf("%w: %q: cannot parse Redis URL: %v", metadata.ErrUnsupportedURL, redact.Strict(rawURL), err), rawURL)
	}
	client := cfg.NewClient()
	s, err := newStore(client, prefix)
	if err != nil {
		client.Close()
		return nil, err
	}
	s.owned = true
	if err := client.Ping(ctx).Err(); err != nil {
		client.Close()
		return nil, metaurl.RedactError(fmt.Errorf("metadata: redis %s: %w", redact.Strict(rawURL), err), rawURL)
	}
	return s, nil
}

// check is metadata.CheckArgs.
func check(ctx context.Context, key string, values ...string) (string, error) {
	return metadata.CheckArgs(ctx, key, values...)
}
