package redisconn_test

import (
	"crypto/tls"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/acemq/msgaudit/internal/redisconn"
)

func TestParse(t *testing.T) {
	cases := []struct {
		url     string
		kind    redisconn.Kind
		addrs   []string
		master  string
		db      int
		tls     bool
		wantErr string // non-empty: Parse fails with an error containing it
	}{
		{url: "redis://127.0.0.1:6379/2", kind: redisconn.Single, addrs: []string{"127.0.0.1:6379"}, db: 2},
		{url: "rediss://h:6380", kind: redisconn.Single, addrs: []string{"h:6380"}, tls: true},
		{url: "unix:///run/redis.sock?db=1", kind: redisconn.Single, addrs: []string{"/run/redis.sock"}, db: 1},
		{url: "redis+cluster://127.0.0.1:7101,127.0.0.1:7102,[::1]:7103", kind: redisconn.Cluster,
			addrs: []string{"127.0.0.1:7101", "127.0.0.1:7102", "[::1]:7103"}},
		{url: "redis+cluster://a,b:7000/", kind: redisconn.Cluster, addrs: []string{"a:6379", "b:7000"}},
		{url: "redis+cluster://a:1/0?addr=b:2&dial_timeout=3s", kind: redisconn.Cluster, addrs: []string{"a:1", "b:2"}},
		{url: "REDISS+CLUSTER://u:p@a:1,b:2?skip_verify=true", kind: redisconn.Cluster, addrs: []string{"a:1", "b:2"}, tls: true},
		{url: "redis+sentinel://s1,s2:26380/mymaster", kind: redisconn.Sentinel,
			addrs: []string{"s1:26379", "s2:26380"}, master: "mymaster"},
		{url: "rediss+sentinel://u:p@s1:1/m/3?sentinel_password=x", kind: redisconn.Sentinel,
			addrs: []string{"s1:1"}, master: "m", db: 3, tls: true},
		{url: "redis+cluster://a:1/1", wantErr: "only database 0"},
		{url: "redis+cluster://", wantErr: "no address"},
		{url: "redis+cluster://a:1,,b:2", wantErr: "empty address"},
		{url: "redis+cluster://a:99999", wantErr: "invalid port"},
		{url: "redis+cluster://a:1?bogus=1", wantErr: "unexpected option"},
		{url: "redis+cluster://a:1?skip_verify=maybe", wantErr: "skip_verify"},
		{url: "redis+sentinel://s1:1", wantErr: "master name"},
		{url: "redis+sentinel://s1:1/", wantErr: "master name"},
		{url: "redis+sentinel://s1:1/m/x", wantErr: "database number"},
		{url: "redis+sentinel://s1:1/m/0/extra", wantErr: "path"},
		{url: "redis+sentinel://s1:1/m?master_name=n", wantErr: "in its path"},
		{url: "redis+sentinel://s1:1/m?bogus=1", wantErr: "unexpected option"},
		{url: "redis:opaque", wantErr: "not a Redis URL"},
		{url: "memcache://h:1", wantErr: "unknown Redis URL scheme"},
	}
	for _, tc := range cases {
		t.Run(tc.url, func(t *testing.T) {
			c, err := redisconn.Parse(tc.url)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("Parse: %v, want an error containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			if c.Kind() != tc.kind || !slices.Equal(c.Addrs(), tc.addrs) || c.MasterName() != tc.master || c.DB() != tc.db || (c.TLS() != nil) != tc.tls {
				t.Fatalf("Parse = kind %v addrs %v master %q db %d tls %v; want %v %v %q %d %v",
					c.Kind(), c.Addrs(), c.MasterName(), c.DB(), c.TLS() != nil, tc.kind, tc.addrs, tc.master, tc.db, tc.tls)
			}
			cl := c.NewClient()
			_ = cl.Close()
		})
	}
}

// TestParseCredentials: the URL's user and password go to the data nodes;
// a Sentinel's own come from sentinel_username and sentinel_password;
// skip_verify reaches a cluster's TLS configuration; SetTLS turns TLS on
// with the first address's host as the server name.
func TestParseCredentials(t *testing.T) {
	c, err := redisconn.Parse("redis+sentinel://alice:pw1@s1:1,s2:2/m?sentinel_username=sen&sentinel_password=pw2&dial_timeout=2s")
	if err != nil {
		t.Fatal(err)
	}
	fo := c.FailoverOptions()
	if fo.Username != "alice" || fo.Password != "pw1" || fo.SentinelUsername != "sen" || fo.SentinelPassword != "pw2" || fo.DialTimeout != 2*time.Second {
		t.Fatalf("failover options: user %q pass %q sentinel %q/%q dial %v", fo.Username, fo.Password, fo.SentinelUsername, fo.SentinelPassword, fo.DialTimeout)
	}
	c, err = redisconn.Parse("rediss+cluster://bob:pw@a:1,b:2?skip_verify=true&pool_size=7")
	if err != nil {
		t.Fatal(err)
	}
	co := c.ClusterOptions()
	if co.Username != "bob" || co.Password != "pw" || co.PoolSize != 7 || co.TLSConfig == nil || !co.TLSConfig.InsecureSkipVerify {
		t.Fatalf("cluster options: user %q pass %q pool %d tls %+v", co.Username, co.Password, co.PoolSize, co.TLSConfig)
	}
	c, err = redisconn.Parse("redis+cluster://node1.example:1,b:2")
	if err != nil {
		t.Fatal(err)
	}
	c.SetTLS(&tls.Config{MinVersion: tls.VersionTLS12})
	c.EnableContextTimeout()
	if got := c.TLS(); got == nil || got.ServerName != "node1.example" {
		t.Fatalf("SetTLS: %+v, want server name node1.example", got)
	}
	if !c.ClusterOptions().ContextTimeoutEnabled {
		t.Fatal("EnableContextTimeout did not reach the cluster options")
	}
}

func TestOneHost(t *testing.T) {
	for in, want := range map[string]string{
		"redis+cluster://u:p@127.0.0.1:1,[::1]:2/?x=1": "redis+cluster://u:p@addrs/?x=1",
		"rediss+sentinel://[::1]:26379,h:1/m/0":        "rediss+sentinel://addrs/m/0",
		"redis+cluster://h1:1,h2:2":                    "redis+cluster://addrs",
		"redis://u:p@[::1]:6379/0":                     "redis://u:p@[::1]:6379/0",
		"unix:///run/redis.sock":                       "unix:///run/redis.sock",
		// A raw '#', '?' or '/' in a password stays in the userinfo,
		// where redact.ParseURL refuses it, and is never taken for an
		// address, a query or a path.
		"redis+cluster://u:Top#Secret@h1:1,h2:2?x=1":   "redis+cluster://u:Top#Secret@addrs?x=1",
		"redis+sentinel://u:Top?Secret@h1:1/m":         "redis+sentinel://u:Top?Secret@addrs/m",
		"rediss+sentinel://u:Top/Secret@h1:1,h2:2/m/0": "rediss+sentinel://u:Top/Secret@addrs/m/0",
	} {
		if got := redisconn.OneHost(in); got != want {
			t.Errorf("OneHost(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestParseRawDelimiterInPassword: Parse refuses a cluster or Sentinel URL
// whose password holds a raw '#', '?' or '/' with an error that quotes no
// part of the password; it used to end the address list at that byte and
// quote the password's head as an address ("user:Top": invalid port).
func TestParseRawDelimiterInPassword(t *testing.T) {
	for _, in := range []string{
		"redis+cluster://user:TopQ#SecretQ@127.0.0.1:1,127.0.0.1:2",
		"redis+cluster://user:TopQ?SecretQ@127.0.0.1:1",
		"redis+sentinel://user:TopQ/SecretQ@127.0.0.1:1/mymaster",
		"rediss+sentinel://user:TopQ#SecretQ@127.0.0.1:1/mymaster?dial_timeout=1s",
	} {
		_, err := redisconn.Parse(in)
		if err == nil {
			t.Errorf("Parse(%q) succeeded", in)
			continue
		}
		if strings.Contains(err.Error(), "TopQ") || strings.Contains(err.Error(), "SecretQ") {
			t.Errorf("Parse(%q) = %v: quotes the password", in, err)
		}
	}
}

// TestParseMalformedEscape: a password, a sentinel_password or another
// secret parameter holding a '%' that starts no valid escape makes Parse
// fail, for every scheme, with an error that quotes no part of it; the
// query's malformed value is not dropped in silence (url.Values would
// leave a Sentinel without its password).
func TestParseMalformedEscape(t *testing.T) {
	const head, tail = "TopQ", "SecretQ"
	for _, scheme := range []string{"redis", "rediss", "redis+cluster", "rediss+cluster", "redis+sentinel", "rediss+sentinel"} {
		path := "/0"
		switch {
		case strings.Contains(scheme, "cluster"):
			path = ""
		case strings.Contains(scheme, "sentinel"):
			path = "/m"
		}
		for _, esc := range []string{"%Kx", "%", "%4", "%%"} {
			pw := head + esc + tail
			ins := []string{
				scheme + "://user:" + pw + "@127.0.0.1:1" + path,
				scheme + "://127.0.0.1:1" + path + "?password=" + pw,
				scheme + "://127.0.0.1:1" + path + "?dial_timeout=1s&sentinel_password=" + pw,
			}
			for _, in := range ins {
				_, err := redisconn.Parse(in)
				if err == nil {
					t.Errorf("Parse(%q) succeeded", in)
					continue
				}
				if s := err.Error(); strings.Contains(s, head) || strings.Contains(s, tail) || strings.Contains(s, esc+"S") || strings.Contains(s, `escape "`) {
					t.Errorf("Parse(%q) = %v: quotes the password", in, err)
				}
			}
		}
	}
}
