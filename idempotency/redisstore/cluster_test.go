package redisstore_test

import (
	"context"
	"fmt"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/acemq/msgaudit/idempotency"
	"github.com/acemq/msgaudit/idempotency/redisstore"
	"github.com/acemq/msgaudit/idempotency/storetest"
	"github.com/acemq/msgaudit/internal/claimkit"
	"github.com/acemq/msgaudit/internal/redisconn"
	"github.com/acemq/msgaudit/internal/testkit/storetestkit"
	"github.com/acemq/msgaudit/internal/testkit/testenv"
	"github.com/acemq/msgaudit/internal/testkit/testwait"
)

// clusterLock names the cross-process lock of the test cluster: the
// failover test holds it exclusively, the other cluster tests shared.
const clusterLock = "redis-cluster"

// clusterTestURL returns MSGAUDIT_REDIS_CLUSTER_URL, skipping the test when
// it is unset (failing it in CI).
func clusterTestURL(t testing.TB) string {
	t.Helper()
	return testenv.Getenv(t, "MSGAUDIT_REDIS_CLUSTER_URL", "the Redis Cluster tests need a cluster: scripts/services up redis-cluster")
}

// clusterAdmin returns a cluster client of its own on the test cluster,
// closed at cleanup.
func clusterAdmin(t testing.TB) *redis.ClusterClient {
	t.Helper()
	cfg, err := redisconn.Parse(clusterTestURL(t))
	if err != nil {
		t.Fatalf("MSGAUDIT_REDIS_CLUSTER_URL: %v", err)
	}
	if cfg.Kind() != redisconn.Cluster {
		t.Fatalf("MSGAUDIT_REDIS_CLUSTER_URL is a %v URL, want redis+cluster://", cfg.Kind())
	}
	c := cfg.NewClient().(*redis.ClusterClient)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// clusterDeletePrefix deletes every key under prefix on every master, one
// UNLINK per key (a multi-key command must not span slots).
func clusterDeletePrefix(t testing.TB, c *redis.ClusterClient, prefix string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	err := c.ForEachMaster(ctx, func(ctx context.Context, node *redis.Client) error {
		iter := node.Scan(ctx, 0, prefix+"*", 1000).Iterator()
		pipe := node.Pipeline()
		for iter.Next(ctx) {
			pipe.Unlink(ctx, iter.Val())
			if pipe.Len() == 1000 {
				if _, err := pipe.Exec(ctx); err != nil {
					return err
				}
			}
		}
		if err := iter.Err(); err != nil {
			return err
		}
		if pipe.Len() > 0 {
			_, err := pipe.Exec(ctx)
			return err
		}
		return nil
	})
	if err != nil {
		t.Errorf("cleanup of %s* on the cluster: %v", prefix, err)
	}
}

// openClusterStore opens a store by URL on the test cluster under a fresh
// prefix and removes its keys at cleanup.
func openClusterStore(t testing.TB, o idempotency.Options, extraQuery string) (*redisstore.Store, string) {
	t.Helper()
	raw := clusterTestURL(t)
	admin := clusterAdmin(t)
	prefix := "msgaudit-test:" + storetestkit.Hex(8) + ":"
	t.Cleanup(func() { clusterDeletePrefix(t, admin, prefix) })
	u := storetestkit.WithQuery(raw, "msgaudit_prefix="+url.QueryEscape(prefix))
	if extraQuery != "" {
		u = storetestkit.WithQuery(u, extraQuery)
	}
	s, err := redisstore.Open(testwait.Context(t, time.Minute), u, redisstore.Options{Options: o})
	if err != nil {
		t.Fatalf("open the cluster store: %v", err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s, prefix
}

// TestClusterConformance runs the shared store suite against the Redis
// Cluster, every store opened by a redis+cluster:// URL on its own prefix;
// a restart is a new store (and client) on the same prefix.
func TestClusterConformance(t *testing.T) {
	raw := clusterTestURL(t)
	storetestkit.LockService(t, clusterLock, false)
	var prefixes sync.Map // *redisstore.Store → its prefix
	storetest.Run(t, func(t *testing.T, o idempotency.Options) idempotency.Store {
		s, prefix := openClusterStore(t, o, "")
		prefixes.Store(s, prefix)
		return s
	}, storetest.Capabilities{
		ServerTime: true,
		Reopen: func(t *testing.T, old idempotency.Store, o idempotency.Options) idempotency.Store {
			prefix, ok := prefixes.Load(old)
			if !ok {
				t.Fatalf("Reopen of a store the test did not open: %T", old)
			}
			s, err := redisstore.Open(testwait.Context(t, time.Minute), storetestkit.WithQuery(raw, "msgaudit_prefix="+url.QueryEscape(prefix.(string))), redisstore.Options{Options: o})
			if err != nil {
				t.Fatalf("reopen: %v", err)
			}
			return s
		},
		Unreachable: func(t *testing.T, o idempotency.Options) idempotency.Store {
			client := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{storetestkit.ClosedAddr(t)}, MaxRetries: -1, DialerRetries: 1})
			t.Cleanup(func() { _ = client.Close() })
			s, err := redisstore.New(context.Background(), client, redisstore.Options{Options: o, Prefix: "p:"})
			if err != nil {
				t.Fatal(err)
			}
			return s
		},
	})
}

// TestClusterKeysSpreadOverMasters: the store's keys are plain prefix +
// storage key, no hash tags, so they spread over every master, and a batch
// of keys on different masters is answered in full.
func TestClusterKeysSpreadOverMasters(t *testing.T) {
	clusterTestURL(t)
	storetestkit.LockService(t, clusterLock, false)
	ctx := testwait.Context(t, time.Minute)
	s, prefix := openClusterStore(t, idempotency.Options{}, "")
	admin := clusterAdmin(t)
	keys := make([]idempotency.Key, 64)
	for i := range keys {
		keys[i] = idempotency.Key{Namespace: "spread", ID: fmt.Sprint("m-", i)}
	}
	res := make([]idempotency.ClaimResult, len(keys))
	if err := s.TryClaimBatch(ctx, keys, res); err != nil {
		t.Fatal(err)
	}
	masters := map[string]int{}
	for i, r := range res {
		if r.Err != nil || r.Outcome != idempotency.Claimed {
			t.Fatalf("key %d: %v, %v", i, r.Outcome, r.Err)
		}
		rk := prefix + claimkit.StorageKey(keys[i], 0)
		if strings.ContainsAny(rk, "{}") {
			t.Fatalf("storage key %q holds a hash tag", rk)
		}
		node, err := admin.MasterForKey(ctx, rk)
		if err != nil {
			t.Fatal(err)
		}
		if v := node.Get(ctx, rk).Val(); v != "h:"+r.Claim.Token {
			t.Fatalf("key %d on master %s holds %q, want the claim", i, node.Options().Addr, v)
		}
		masters[node.Options().Addr]++
	}
	if len(masters) < 3 {
		t.Fatalf("64 keys landed on %d masters (%v), want all 3", len(masters), masters)
	}
}
