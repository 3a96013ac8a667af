// Package redisconn turns the Redis URLs of msgaudit's Redis backends
// (idempotency/redisstore and metadata/redismeta) into go-redis clients: a
// single server, a Redis Cluster or a master found through Sentinel.
//
//	redis://[user:pass@]host:port[/db][?opts]      one server (go-redis's ParseURL; unix:// too)
//	rediss://…                                     the same over TLS
//	redis+cluster://[user:pass@]host:port[,host:port…][?opts]
//	                                               Redis Cluster; the addresses are seeds,
//	                                               the client learns the others
//	redis+sentinel://[user:pass@]host:port[,host:port…]/MASTER[/db][?opts]
//	                                               the master MASTER that the Sentinels at
//	                                               the addresses name, followed across failovers
//
// rediss+cluster:// and rediss+sentinel:// use TLS with the system roots
// (for every node, and for the Sentinels). The user and password of the URL
// authenticate to the data nodes; Sentinels that require their own password
// take sentinel_username and sentinel_password query parameters. A cluster
// address without a port means 6379, a Sentinel one 26379. The other query
// parameters are go-redis's options for that client (ParseURL,
// ParseClusterURL, ParseFailoverURL: dial_timeout, pool_size, …); an
// unknown one is an error.
//
// The addresses are separated by commas in the host part, the form most
// Redis clients use for several nodes; go-redis's own repeated addr=
// parameters are accepted as well. The userinfo ends at the last '@': a
// raw '/', '?' or '#' in a user name or password is refused (percent-encode
// it), never taken for the end of the address list.
package redisconn

import (
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"

	"github.com/acemq/msgaudit/internal/redact"
	"github.com/redis/go-redis/v9"
)

// Kind is the deployment a URL names.
type Kind uint8

const (
	// Single is one server (or a replica set reached through one address).
	Single Kind = iota + 1
	// Cluster is Redis Cluster.
	Cluster
	// Sentinel is a master found through Redis Sentinel.
	Sentinel
)

// String returns "single", "cluster" or "sentinel".
func (k Kind) String() string {
	switch k {
	case Single:
		return "single"
	case Cluster:
		return "cluster"
	case Sentinel:
		return "sentinel"
	}
	return "kind(invalid)"
}

// Schemes are the URL schemes this package parses, lower case.
var Schemes = []string{"redis", "rediss", "unix", "redis+cluster", "rediss+cluster", "redis+sentinel", "rediss+sentinel"}

// Config is a parsed Redis URL: the options of the client it names.
type Config struct {
	kind     Kind
	single   *redis.Options
	cluster  *redis.ClusterOptions
	failover *redis.FailoverOptions
}

// Parse parses rawURL (whose msgaudit_ parameters the caller has removed).
// A URL net/url cannot split as a backend would, or whose query holds a
// malformed pair, is refused as redact.ParseURL refuses it, with an error
// that quotes no part of the user information or the query; go-redis's
// errors about options may still quote a parameter: callers redact them.
func Parse(rawURL string) (*Config, error) {
	scheme, _, ok := strings.Cut(rawURL, "://")
	if !ok {
		return nil, errors.New("not a Redis URL (want redis://, rediss://, unix://, redis+cluster:// or redis+sentinel://)")
	}
	// go-redis would quote the URL in a syntax error, and drop a query
	// pair with a bad %-escape (a password among them) in silence.
	if _, err := redact.ParseURL(OneHost(rawURL)); err != nil {
		return nil, err
	}
	switch strings.ToLower(scheme) {
	case "redis", "rediss", "unix":
		o, err := redis.ParseURL(rawURL)
		if err != nil {
			return nil, err
		}
		return &Config{kind: Single, single: o}, nil
	case "redis+cluster", "rediss+cluster":
		return parseCluster(rawURL)
	case "redis+sentinel", "rediss+sentinel":
		return parseSentinel(rawURL)
	}
	return nil, fmt.Errorf("unknown Redis URL scheme %q", scheme)
}

// parseCluster translates a redis+cluster:// URL to go-redis's cluster URL
// (first address as host, the others as addr= parameters).
func parseCluster(rawURL string) (*Config, error) {
	u, addrs, err := splitAddrs(rawURL, "6379")
	if err != nil {
		return nil, err
	}
	switch u.Path {
	case "", "/", "/0":
	default:
		return nil, fmt.Errorf("a Redis Cluster URL takes no database (Redis Cluster has only database 0), got path %q", u.Path)
	}
	u.Path, u.RawPath = "", ""
	// go-redis's cluster URL has no skip_verify; it is applied here, as
	// ParseURL applies it for one server.
	q := u.Query()
	skip := false
	if q.Has("skip_verify") {
		if skip, err = strconv.ParseBool(q.Get("skip_verify")); err != nil {
			return nil, fmt.Errorf("invalid skip_verify %q", q.Get("skip_verify"))
		}
		q.Del("skip_verify")
		u.RawQuery = q.Encode()
	}
	setAddrs(u, addrs)
	o, err := redis.ParseClusterURL(u.String())
	if err != nil {
		return nil, err
	}
	if skip && o.TLSConfig != nil {
		o.TLSConfig.InsecureSkipVerify = true
	}
	return &Config{kind: Cluster, cluster: o}, nil
}

// parseSentinel translates a redis+sentinel:// URL to go-redis's failover
// URL. The URL's user and password are the data nodes'; the Sentinels'
// come from sentinel_username and sentinel_password.
func parseSentinel(rawURL string) (*Config, error) {
	u, addrs, err := splitAddrs(rawURL, "26379")
	if err != nil {
		return nil, err
	}
	segs := strings.Split(strings.Trim(u.Path, "/"), "/")
	if len(segs) == 0 || segs[0] == "" {
		return nil, errors.New("a Redis Sentinel URL needs the master name as its path: redis+sentinel://host:26379/MASTER[/db]")
	}
	if len(segs) > 2 {
		return nil, fmt.Errorf("a Redis Sentinel URL's path is /MASTER[/db], got %q", u.Path)
	}
	master := segs[0]
	db := 0
	if len(segs) == 2 {
		if db, err = strconv.Atoi(segs[1]); err != nil || db < 0 {
			return nil, fmt.Errorf("invalid database number %q", segs[1])
		}
	}
	user, pass := "", ""
	if u.User != nil {
		user = u.User.Username()
		pass, _ = u.User.Password()
	}
	q := u.Query()
	sentUser, sentPass := q.Get("sentinel_username"), q.Get("sentinel_password")
	q.Del("sentinel_username")
	q.Del("sentinel_password")
	if q.Has("master_name") || q.Has("db") {
		return nil, errors.New("a Redis Sentinel URL names the master and database in its path, not as master_name or db parameters")
	}
	u.RawQuery = q.Encode()
	u.User = nil
	u.Path, u.RawPath = "", ""
	setAddrs(u, addrs)
	o, err := redis.ParseFailoverURL(u.String())
	if err != nil {
		return nil, err
	}
	o.MasterName = master
	o.DB = db
	o.Username, o.Password = user, pass
	o.SentinelUsername, o.SentinelPassword = sentUser, sentPass
	return &Config{kind: Sentinel, failover: o}, nil
}

// splitAddrs parses rawURL and splits its host part at commas into
// host:port addresses (defaultPort where none is given). The returned URL
// has the go-redis scheme (redis or rediss).
func splitAddrs(rawURL, defaultPort string) (*url.URL, []string, error) {
	// The address list is cut out before url.Parse, which refuses an
	// IPv6 literal that is not the whole host.
	scheme, rest, _ := strings.Cut(rawURL, "://")
	userinfo, hosts, tail := cutAuthority(rest)
	if strings.ContainsAny(userinfo, "/?#") {
		// Where such a password ends is a guess; quote none of it.
		return nil, nil, errors.New("a raw '/', '?', '#' or '@' in the user information; percent-encode them in a user name or password (%2F %3F %23 %40)")
	}
	u, err := url.Parse(scheme + "://" + userinfo + "placeholder" + tail)
	if err != nil {
		// Parse has checked the same text with another host.
		return nil, nil, errors.New("cannot parse the URL")
	}
	tls := strings.HasPrefix(strings.ToLower(scheme), "rediss+")
	u.Scheme = "redis"
	if tls {
		u.Scheme = "rediss"
	}
	if hosts == "" {
		return nil, nil, errors.New("no address: want host:port[,host:port…]")
	}
	var addrs []string
	for _, a := range strings.Split(hosts, ",") {
		if a == "" {
			return nil, nil, fmt.Errorf("empty address in %q", hosts)
		}
		host, port, err := net.SplitHostPort(a)
		if err != nil {
			// No port: the default one.
			host, port = strings.TrimSuffix(strings.TrimPrefix(a, "["), "]"), defaultPort
			if strings.Contains(host, ":") && !strings.HasPrefix(a, "[") {
				return nil, nil, fmt.Errorf("address %q: %v", a, err)
			}
		}
		if host == "" {
			return nil, nil, fmt.Errorf("address %q has no host", a)
		}
		if p, err := strconv.Atoi(port); err != nil || p <= 0 || p > 65535 {
			return nil, nil, fmt.Errorf("address %q: invalid port", a)
		}
		addrs = append(addrs, net.JoinHostPort(host, port))
	}
	return u, addrs, nil
}

// setAddrs makes addrs[0] u's host and the others addr= parameters, the
// form of go-redis's cluster and failover URLs.
func setAddrs(u *url.URL, addrs []string) {
	u.Host = addrs[0]
	if len(addrs) == 1 {
		return
	}
	q := u.Query()
	for _, a := range addrs[1:] {
		q.Add("addr", a)
	}
	u.RawQuery = q.Encode()
}

// Kind returns the deployment the URL names.
func (c *Config) Kind() Kind { return c.kind }

// Addrs returns the addresses the client starts from: the server, the
// cluster's seed nodes or the Sentinels.
func (c *Config) Addrs() []string {
	switch c.kind {
	case Cluster:
		return append([]string(nil), c.cluster.Addrs...)
	case Sentinel:
		return append([]string(nil), c.failover.SentinelAddrs...)
	}
	return []string{c.single.Addr}
}

// MasterName returns the Sentinel master name ("" unless Kind is Sentinel).
func (c *Config) MasterName() string {
	if c.kind == Sentinel {
		return c.failover.MasterName
	}
	return ""
}

// DB returns the database number (0 for a cluster).
func (c *Config) DB() int {
	switch c.kind {
	case Single:
		return c.single.DB
	case Sentinel:
		return c.failover.DB
	}
	return 0
}

// TLS returns the TLS configuration the client will use, nil for none.
func (c *Config) TLS() *tls.Config {
	switch c.kind {
	case Cluster:
		return c.cluster.TLSConfig
	case Sentinel:
		return c.failover.TLSConfig
	}
	return c.single.TLSConfig
}

// SetTLS replaces the TLS configuration with a clone of t, which turns TLS
// on even for a redis:// URL. When t's ServerName is empty, the host of
// the first address is used.
func (c *Config) SetTLS(t *tls.Config) {
	if t == nil {
		return
	}
	t = t.Clone()
	if t.ServerName == "" {
		if host, _, err := net.SplitHostPort(c.Addrs()[0]); err == nil {
			t.ServerName = host
		}
	}
	switch c.kind {
	case Cluster:
		c.cluster.TLSConfig = t
	case Sentinel:
		c.failover.TLSConfig = t
	default:
		c.single.TLSConfig = t
	}
}

// EnableContextTimeout makes the client honour the deadlines of the
// contexts passed to its commands, not only its fixed read and write
// timeouts (go-redis's ContextTimeoutEnabled).
func (c *Config) EnableContextTimeout() {
	switch c.kind {
	case Cluster:
		c.cluster.ContextTimeoutEnabled = true
	case Sentinel:
		c.failover.ContextTimeoutEnabled = true
	default:
		c.single.ContextTimeoutEnabled = true
	}
}

// NewClient returns a new client for the configuration: a *redis.Client,
// a *redis.ClusterClient, or a *redis.Client that follows the Sentinels'
// master (go-redis's failover client). It does no I/O.
func (c *Config) NewClient() redis.UniversalClient {
	switch c.kind {
	case Cluster:
		return redis.NewClusterClient(c.cluster)
	case Sentinel:
		return redis.NewFailoverClient(c.failover)
	}
	return redis.NewClient(c.single)
}

// ClusterOptions returns the cluster client's options (nil unless Kind is
// Cluster); changes to them reach NewClient.
func (c *Config) ClusterOptions() *redis.ClusterOptions { return c.cluster }

// FailoverOptions returns the Sentinel client's options (nil unless Kind
// is Sentinel); changes to them reach NewClient.
func (c *Config) FailoverOptions() *redis.FailoverOptions { return c.failover }

// Options returns the single-server client's options (nil unless Kind is
// Single); changes to them reach NewClient.
func (c *Config) Options() *redis.Options { return c.single }

// OneHost returns rawURL with a cluster or Sentinel URL's address list
// replaced by the single host "addrs", for checks that split a URL with
// net/url, which refuses an IPv6 literal inside a list. Other URLs are
// returned unchanged.
func OneHost(rawURL string) string {
	scheme, rest, ok := strings.Cut(rawURL, "://")
	if !ok || !strings.Contains(scheme, "+") {
		return rawURL
	}
	userinfo, _, tail := cutAuthority(rest)
	return scheme + "://" + userinfo + "addrs" + tail
}

// cutAuthority splits rest, a URL after "://", into the userinfo (up to
// and including the last '@', "" without one), the address list (up to
// the first '/', '?' or '#' after it) and the tail. The userinfo ends at
// the last '@' even past a '/', '?' or '#', so that a password holding one
// of them stays in the userinfo, where checks refuse it (see
// redact.ParseURL), and is never taken for an address, a path or a query
// that errors would quote.
func cutAuthority(rest string) (userinfo, hosts, tail string) {
	if at := strings.LastIndexByte(rest, '@'); at >= 0 {
		userinfo, rest = rest[:at+1], rest[at+1:]
	}
	end := strings.IndexAny(rest, "/?#")
	if end < 0 {
		end = len(rest)
	}
	return userinfo, rest[:end], rest[end:]
}
