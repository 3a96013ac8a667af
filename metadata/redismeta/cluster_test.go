package redismeta_test

import (
	"context"
	"net/url"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/acemq/msgaudit/internal/redisconn"
	"github.com/acemq/msgaudit/internal/testkit/storetestkit"
	"github.com/acemq/msgaudit/internal/testkit/testenv"
	"github.com/acemq/msgaudit/internal/testkit/testwait"
	"github.com/acemq/msgaudit/metadata"
	"github.com/acemq/msgaudit/metadata/storetest"
)

// clusterURL returns MSGAUDIT_REDIS_CLUSTER_URL, skipping the test when it
// is unset (failing under CI).
func clusterURL(t testing.TB) string {
	t.Helper()
	return testenv.Getenv(t, "MSGAUDIT_REDIS_CLUSTER_URL", "the Redis Cluster tests need a cluster: scripts/services up redis-cluster")
}

// TestClusterConformance runs the metadata conformance suite on the Redis
// Cluster, every store opened by metadata.Open with the redis+cluster://
// URL on a prefix of the test's own (a new client per reopen, as another
// process would have). The cluster is shared with the test that kills one
// of its nodes (in idempotency/redisstore), so this one holds the lock
// that keeps them apart.
func TestClusterConformance(t *testing.T) {
	raw := clusterURL(t)
	storetestkit.LockService(t, "redis-cluster", false)
	cfg, err := redisconn.Parse(raw)
	if err != nil || cfg.Kind() != redisconn.Cluster {
		t.Fatalf("MSGAUDIT_REDIS_CLUSTER_URL: %v (kind %v), want a redis+cluster:// URL", err, cfg.Kind())
	}
	admin := cfg.NewClient().(*redis.ClusterClient)
	t.Cleanup(func() { _ = admin.Close() })
	storetest.Run(t, func(t *testing.T) storetest.Opener {
		prefix := "mdtest_" + storetestkit.Hex(6) + ":"
		t.Cleanup(func() { clusterDeletePrefix(t, admin, prefix) })
		u := storetestkit.WithQuery(raw, "msgaudit_prefix="+url.QueryEscape(prefix))
		return func(t *testing.T) metadata.Store {
			s, err := metadata.Open(testwait.Context(t, time.Minute), u)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = s.Close() })
			return s
		}
	})
}

// clusterDeletePrefix deletes every key under prefix on every master, one
// DEL per key (a multi-key command must not span slots).
func clusterDeletePrefix(t testing.TB, c *redis.ClusterClient, prefix string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	err := c.ForEachMaster(ctx, func(ctx context.Context, node *redis.Client) error {
		iter := node.Scan(ctx, 0, prefix+"*", 1000).Iterator()
		var keys []string
		for iter.Next(ctx) {
			keys = append(keys, iter.Val())
		}
		if err := iter.Err(); err != nil {
			return err
		}
		pipe := node.Pipeline()
		for _, k := range keys {
			pipe.Del(ctx, k)
		}
		if len(keys) > 0 {
			_, err := pipe.Exec(ctx)
			return err
		}
		return nil
	})
	if err != nil {
		t.Errorf("cleanup of %s* on the cluster: %v", prefix, err)
	}
}
