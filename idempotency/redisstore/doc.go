// Package redisstore is the Redis backend of package idempotency (go-redis
// v9): a store shared by several consumer machines, kept with the Redis
// server's clock.
//
// Importing it registers the "redis" and "rediss" schemes (one server),
// "redis+cluster" and "rediss+cluster" (Redis Cluster) and
// "redis+sentinel" and "rediss+sentinel" (a master found through Redis
// Sentinel) with idempotency.Open:
//
//	import _ "github.com/acemq/msgaudit/idempotency/redisstore"
//
//	s, err := idempotency.Open(ctx, "redis://127.0.0.1:6379/0", idempotency.Options{})
//
// Redis expires the store's keys itself (each is written with its lease or
// retention as PX), so the store has no purge: Options.PurgeInterval and
// Options.PurgeBatch do not apply to it.
//
// New builds a store on a client the caller made (a *redis.Client,
// *redis.ClusterClient or failover client); Open connects from a URL (and
// accepts a TLS configuration a URL cannot express).
//
// # Cluster and Sentinel
//
//	redis+cluster://[user:pass@]host:port[,host:port…][?opts]
//	redis+sentinel://[user:pass@]host:port[,host:port…]/MASTER[/db][?opts]
//
// A cluster URL lists seed nodes, comma-separated in the host part (the
// form most Redis clients use for several nodes; go-redis's repeated addr=
// parameters work too); go-redis's cluster client learns the other nodes,
// routes each key to the master of its slot and follows MOVED and ASK
// redirects and failovers. A Sentinel URL lists Sentinels and names the
// master in its path; the failover client asks them for the current master
// and reconnects when they promote another. The URL's user and password are
// the data nodes'; Sentinels with a password of their own take
// sentinel_username and sentinel_password. Other query parameters are
// go-redis's options of that client (ParseClusterURL, ParseFailoverURL).
//
// Every script the store runs touches exactly one key, and a batch is a
// pipeline of such scripts, so every command stays within one hash slot
// and nothing needs hash tags: the key layout (prefix + storage key) is
// the same on one server, a cluster or behind Sentinel, and a store moved
// from one server to a cluster reads the same keys once they are migrated
// (redis-cli --cluster import). A prefix holding a hash tag ("{orders}:")
// is allowed but puts every key of the store in one slot, on one master.
//
// Replication in Redis is asynchronous: a write a master acknowledged may
// be missing from the replica that a failover promotes (see the Redis
// Cluster specification). A claim or confirmation lost that way is
// forgotten: the key can be claimed again, and a redelivery of finished
// work runs twice. TestClusterFailover kills a master during a claim storm
// and reports what it saw; it has not seen such a loss, which shows that
// the window is small on loopback, not that it is closed.
package redisstore

import "github.com/acemq/msgaudit/idempotency"

func init() {
	for _, scheme := range []string{"redis", "rediss", "redis+cluster", "rediss+cluster", "redis+sentinel", "rediss+sentinel"} {
		idempotency.Register(scheme, openRedisURL)
	}
}
