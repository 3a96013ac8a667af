package redisstore_test

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unicode"

	"github.com/acemq/msgaudit/internal/testkit/storetestkit"

	"github.com/redis/go-redis/v9"
	"pgregory.net/rapid"

	"github.com/acemq/msgaudit/idempotency"
	"github.com/acemq/msgaudit/idempotency/pgstore"
	"github.com/acemq/msgaudit/idempotency/redisstore"
	"github.com/acemq/msgaudit/idempotency/storetest"
	"github.com/acemq/msgaudit/internal/claimkit"
	"github.com/acemq/msgaudit/internal/testkit/testenv"
	"github.com/acemq/msgaudit/internal/testkit/testwait"
)

// redisTestURL returns MSGAUDIT_REDIS_URL, skipping the test when it is unset
// (failing it in CI).
func redisTestURL(t testing.TB) string {
	t.Helper()
	return testenv.Getenv(t, "MSGAUDIT_REDIS_URL", "the Redis store tests need a server")
}

// redisTestClient connects to MSGAUDIT_REDIS_URL and returns the client and
// a fresh key prefix. At cleanup every key under the prefix is deleted
// (SCAN + DEL) and the client closed.
func redisTestClient(t testing.TB) (*redis.Client, string) {
	t.Helper()
	opt, err := redis.ParseURL(redisTestURL(t))
	if err != nil {
		t.Fatalf("MSGAUDIT_REDIS_URL: %v", err)
	}
	client := redis.NewClient(opt)
	prefix := "msgaudit-test:" + storetestkit.Hex(8) + ":"
	t.Cleanup(func() {
		redisDeletePrefix(t, client, prefix)
		_ = client.Close()
	})
	return client, prefix
}

// redisDeletePrefix deletes every key that starts with prefix.
func redisDeletePrefix(t testing.TB, client redis.UniversalClient, prefix string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	iter := client.Scan(ctx, 0, prefix+"*", 1000).Iterator()
	var keys []string
	for iter.Next(ctx) {
		keys = append(keys, iter.Val())
		if len(keys) == 1000 {
			if err := client.Unlink(ctx, keys...).Err(); err != nil {
				t.Errorf("cleanup of %s*: %v", prefix, err)
				return
			}
			keys = keys[:0]
		}
	}
	if err := iter.Err(); err != nil {
		t.Errorf("cleanup scan of %s*: %v", prefix, err)
		return
	}
	if len(keys) > 0 {
		if err := client.Unlink(ctx, keys...).Err(); err != nil {
			t.Errorf("cleanup of %s*: %v", prefix, err)
		}
	}
}

// newRedisTestStore returns a store on its own prefix of the test server.
func newRedisTestStore(t testing.TB, o idempotency.Options) (*redisstore.Store, *redis.Client, string) {
	t.Helper()
	client, prefix := redisTestClient(t)
	s, err := redisstore.New(context.Background(), client, redisstore.Options{Options: o, Prefix: prefix})
	if err != nil {
		t.Fatalf("redisstore.New: %v", err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s, client, prefix
}

// redisCounter is a go-redis hook that counts the commands (round trips)
// sent, pipelines counted once.
type redisCounter struct{ n atomic.Int64 }

func (c *redisCounter) DialHook(next redis.DialHook) redis.DialHook { return next }

func (c *redisCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		c.n.Add(1)
		return next(ctx, cmd)
	}
}

func (c *redisCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		c.n.Add(1)
		return next(ctx, cmds)
	}
}

// TestRedisConformance runs the shared store suite against the Redis
// server: every store on its own key prefix; a restart is a new client and
// store opened by URL on the same prefix.
func TestRedisConformance(t *testing.T) {
	raw := redisTestURL(t)
	var prefixes sync.Map // *redisstore.Store → its prefix
	storetest.Run(t, func(t *testing.T, o idempotency.Options) idempotency.Store {
		s, _, prefix := newRedisTestStore(t, o)
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
			client := redis.NewClient(&redis.Options{Addr: storetestkit.ClosedAddr(t), MaxRetries: -1, DialerRetries: 1})
			t.Cleanup(func() { _ = client.Close() })
			s, err := redisstore.New(context.Background(), client, redisstore.Options{Options: o, Prefix: "p:"})
			if err != nil {
				t.Fatal(err)
			}
			return s
		},
	})
}

func TestRedisRoundTrips(t *testing.T) {
	t.Parallel()
	ctx := testwait.Context(t, time.Minute)
	s, client, _ := newRedisTestStore(t, idempotency.Options{})
	var rt redisCounter
	client.AddHook(&rt)

	// count runs f and returns the round trips it cost.
	count := func(f func()) int64 {
		before := rt.n.Load()
		f()
		return rt.n.Load() - before
	}
	// Warm up: the first script runs may load the scripts (EVALSHA answered
	// NOSCRIPT, then EVAL).
	for _, k := range []string{"warm-1", "warm-2"} {
		_, c, err := s.TryClaim(ctx, idempotency.Key{Namespace: "rt", ID: k})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.Renew(ctx, c); err != nil {
			t.Fatal(err)
		}
		if k == "warm-1" {
			err = s.Confirm(ctx, c)
		} else {
			err = s.Release(ctx, c)
		}
		if err != nil {
			t.Fatal(err)
		}
	}

	for i := range 20 {
		key := idempotency.Key{Namespace: "rt", ID: fmt.Sprint("m-", i)}
		var (
			out idempotency.Outcome
			c   idempotency.Claim
			err error
		)
		steps := []struct {
			name string
			f    func()
		}{
			{"TryClaim(new)", func() { out, c, err = s.TryClaim(ctx, key) }},
			{"Renew", func() { c, err = s.Renew(ctx, c) }},
			{"Confirm", func() { err = s.Confirm(ctx, c) }},
			{"TryClaim(confirmed)", func() { out, _, err = s.TryClaim(ctx, key) }},
			{"IsConfirmed", func() { _, err = s.IsConfirmed(ctx, key) }},
		}
		for _, st := range steps {
			if n := count(st.f); n != 1 {
				t.Errorf("%s: %d round trips, want 1", st.name, n)
			}
			if err != nil {
				t.Fatalf("%s: %v", st.name, err)
			}
		}
		if out != idempotency.AlreadyConfirmed {
			t.Fatalf("TryClaim after Confirm = %v", out)
		}
		other := idempotency.Key{Namespace: "rt2", ID: fmt.Sprint("m-", i)}
		var ok bool
		if n := count(func() { c, ok, err = redisstore.Claim(ctx, s, other) }); n != 1 || err != nil || !ok {
			t.Fatalf("Claim: %d round trips, ok=%v, err=%v", n, ok, err)
		}
		if n := count(func() { err = s.Release(ctx, c) }); n != 1 || err != nil {
			t.Fatalf("Release: %d round trips, err=%v", n, err)
		}
	}
}

// TestRedisStorageLayout pins what the store writes, so operators can read
// the keyspace: prefix + storage key, "h:<token>" with the claim TTL while
// claimed, "c" with the retention once confirmed, nothing once released.
func TestRedisStorageLayout(t *testing.T) {
	t.Parallel()
	ctx := testwait.Context(t, time.Minute)
	o := idempotency.Options{ClaimTTL: time.Hour, Retention: 48 * time.Hour}
	s, client, prefix := newRedisTestStore(t, o)
	key := idempotency.Key{Namespace: "orders", ID: "ID:host-1-2-3:1:1:1:7"}
	rk := prefix + claimkit.StorageKey(key, claimkit.DefaultMaxKeyLength)

	out, c, err := s.TryClaim(ctx, key)
	if err != nil || out != idempotency.Claimed {
		t.Fatalf("TryClaim = %v, %v", out, err)
	}
	if v := client.Get(ctx, rk).Val(); v != "h:"+c.Token {
		t.Errorf("claimed value = %q, want %q", v, "h:"+c.Token)
	}
	if ttl := client.PTTL(ctx, rk).Val(); ttl <= 0 || ttl > time.Hour {
		t.Errorf("claim PTTL = %v, want in (0, 1h]", ttl)
	}
	if err := s.Confirm(ctx, c); err != nil {
		t.Fatal(err)
	}
	if v := client.Get(ctx, rk).Val(); v != "c" {
		t.Errorf("confirmed value = %q, want \"c\"", v)
	}
	if ttl := client.PTTL(ctx, rk).Val(); ttl <= time.Hour || ttl > 48*time.Hour {
		t.Errorf("confirmation PTTL = %v, want in (1h, 48h]", ttl)
	}

	key2 := idempotency.Key{Namespace: "orders", ID: "other"}
	_, c2, err := s.TryClaim(ctx, key2)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Release(ctx, c2); err != nil {
		t.Fatal(err)
	}
	if n := client.Exists(ctx, prefix+claimkit.StorageKey(key2, 0)).Val(); n != 0 {
		t.Errorf("released key still exists")
	}

	// A value the store did not write is an error, never a verdict.
	foreign := idempotency.Key{Namespace: "orders", ID: "foreign"}
	if err := client.Set(ctx, prefix+claimkit.StorageKey(foreign, 0), "something else", time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	if out, _, err := s.TryClaim(ctx, foreign); err == nil {
		t.Errorf("TryClaim on a foreign value = %v, want an error", out)
	}
}

// TestRedisOwnershipOfClient: Close closes a client the store opened and
// leaves one passed to redisstore.New open; a closed store answers ErrClosed.
func TestRedisOwnershipOfClient(t *testing.T) {
	t.Parallel()
	ctx := testwait.Context(t, time.Minute)
	s, client, _ := newRedisTestStore(t, idempotency.Options{})
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := client.Ping(ctx).Err(); err != nil {
		t.Errorf("redisstore.New store closed the caller's client: %v", err)
	}
	if _, _, err := s.TryClaim(ctx, idempotency.Key{ID: "x"}); !errors.Is(err, idempotency.ErrClosed) {
		t.Errorf("TryClaim after Close: %v, want ErrClosed", err)
	}

	owned, err := redisstore.Open(ctx, redisTestURL(t), redisstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := owned.Close(); err != nil {
		t.Fatal(err)
	}
	if err := owned.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
}

// TestRedisURLPrefix: msgaudit_prefix in the URL chooses the key prefix and
// does not reach go-redis (which rejects unknown options).
func TestRedisURLPrefix(t *testing.T) {
	t.Parallel()
	ctx := testwait.Context(t, time.Minute)
	client, prefix := redisTestClient(t)
	raw := redisTestURL(t)
	sep := "?"
	if strings.Contains(raw, "?") {
		sep = "&"
	}
	s, err := redisstore.Open(ctx, raw+sep+"msgaudit_prefix="+prefix, redisstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	key := idempotency.Key{Namespace: "n", ID: "1"}
	if _, _, err := s.TryClaim(ctx, key); err != nil {
		t.Fatal(err)
	}
	if n := client.Exists(ctx, prefix+claimkit.StorageKey(key, 0)).Val(); n != 1 {
		t.Errorf("key not under the URL's prefix %q", prefix)
	}
}

// TestRedisUnreachable: a server that cannot be reached is an error from
// every operation, never a verdict, and redisstore.Open fails at its ping.
func TestRedisUnreachable(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	addr := storetestkit.ClosedAddr(t)
	client := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, DialerRetries: 1})
	defer client.Close()
	s, err := redisstore.New(ctx, client, redisstore.Options{Prefix: "p:"})
	if err != nil {
		t.Fatal(err)
	}
	key := idempotency.Key{Namespace: "n", ID: "1"}
	if out, _, err := s.TryClaim(ctx, key); err == nil {
		t.Errorf("TryClaim on a closed port = %v, want an error", out)
	}
	if _, ok, err := redisstore.Claim(ctx, s, key); err == nil {
		t.Errorf("Claim on a closed port = %v, want an error", ok)
	}
	if ok, err := s.IsConfirmed(ctx, key); err == nil {
		t.Errorf("IsConfirmed on a closed port = %v, want an error", ok)
	}
	c := idempotency.Claim{Key: key, Token: "t"}
	if err := s.Confirm(ctx, c); err == nil || errors.Is(err, idempotency.ErrClaimLost) {
		t.Errorf("Confirm on a closed port = %v, want a connection error", err)
	}
	if err := s.Release(ctx, c); err == nil || errors.Is(err, idempotency.ErrClaimLost) {
		t.Errorf("Release on a closed port = %v, want a connection error", err)
	}
	if _, err := s.Renew(ctx, c); err == nil || errors.Is(err, idempotency.ErrClaimLost) {
		t.Errorf("Renew on a closed port = %v, want a connection error", err)
	}
	if _, err := redisstore.Open(ctx, "redis://"+addr+"/0?max_retries=-1", redisstore.Options{}); err == nil {
		t.Error("redisstore.Open on a closed port: nil error")
	}
}

// TestRedisRedaction: errors of a failing open never contain the password,
// whether the URL is unparsable, the port closed or the password wrong.
func TestRedisRedaction(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	const pw = "Sup3rSecretPW"
	addr := storetestkit.ClosedAddr(t)
	cases := []struct{ name, url string }{
		{"closed port", "redis://:" + pw + "@" + addr + "/0?max_retries=-1"},
		{"closed port with ACL user", "redis://alice:" + pw + "@" + addr + "/0?max_retries=-1"},
		{"unparsable", "redis://:" + pw + "%zz@" + addr + "/0"},
		{"bad port", "redis://:" + pw + "@127.0.0.1:notaport/0"},
		{"bad option", "redis://:" + pw + "@" + addr + "/0?bogus_option=1"},
		{"bad db", "redis://:" + pw + "@" + addr + "/x"},
		{"cluster closed port", "redis+cluster://:" + pw + "@" + addr + "," + addr + "?max_retries=-1&dial_timeout=1s"},
		{"cluster bad option", "redis+cluster://:" + pw + "@" + addr + "?bogus_option=1"},
		{"cluster IPv6 in the list", "redis+cluster://u:" + pw + "@" + addr + ",[::1]:1?max_retries=-1&bogus_option=1"},
		{"cluster with a database", "rediss+cluster://u:" + pw + "@" + addr + "/3"},
		{"sentinel without master", "redis+sentinel://:" + pw + "@" + addr},
		{"sentinel closed port", "redis+sentinel://:" + pw + "@" + addr + "/m?max_retries=-1&sentinel_password=" + pw},
	}
	for _, tc := range cases {
		t.Run("case="+tc.name, func(t *testing.T) {
			_, err := redisstore.Open(ctx, tc.url, redisstore.Options{})
			if err == nil {
				t.Fatal("nil error")
			}
			for _, text := range []string{err.Error(), fmt.Sprintf("%v", err), fmt.Sprintf("%+v", err), fmt.Sprintf("%q", err)} {
				if strings.Contains(text, pw) {
					t.Errorf("error shows the password: %s", text)
				}
			}
		})
	}
}

// TestRedisCancelled: a cancelled context returns ctx.Err() before any I/O.
func TestRedisCancelled(t *testing.T) {
	t.Parallel()
	s, client, _ := newRedisTestStore(t, idempotency.Options{})
	var rt redisCounter
	client.AddHook(&rt)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	key := idempotency.Key{Namespace: "n", ID: "1"}
	if _, _, err := s.TryClaim(ctx, key); !errors.Is(err, context.Canceled) {
		t.Errorf("TryClaim: %v", err)
	}
	if _, _, err := redisstore.Claim(ctx, s, key); !errors.Is(err, context.Canceled) {
		t.Errorf("Claim: %v", err)
	}
	if _, err := s.IsConfirmed(ctx, key); !errors.Is(err, context.Canceled) {
		t.Errorf("IsConfirmed: %v", err)
	}
	c := idempotency.Claim{Key: key, Token: "t"}
	if err := s.Confirm(ctx, c); !errors.Is(err, context.Canceled) {
		t.Errorf("Confirm: %v", err)
	}
	if err := s.Release(ctx, c); !errors.Is(err, context.Canceled) {
		t.Errorf("Release: %v", err)
	}
	if _, err := s.Renew(ctx, c); !errors.Is(err, context.Canceled) {
		t.Errorf("Renew: %v", err)
	}
	if n := rt.n.Load(); n != 0 {
		t.Errorf("%d commands sent with a cancelled context", n)
	}
}

// redisServerBinary returns the path of redis-server, skipping (failing in
// CI) when it is missing.
func redisServerBinary(t testing.TB) string {
	t.Helper()
	p, err := exec.LookPath("redis-server")
	testenv.Require(t, err == nil, "redis-server not found (the password and TLS tests start their own)",
		"apt-get install redis-server")
	return p
}

// startRedisServer runs a private redis-server on a free loopback port with
// the extra arguments, waits until it accepts connections and kills it at
// cleanup. It returns the address. With tlsOnly the port is the TLS port
// and the plain port is off (the TLS files come in args).
func startRedisServer(t testing.TB, tlsOnly bool, args ...string) string {
	t.Helper()
	bin := redisServerBinary(t)
	addr := storetestkit.ClosedAddr(t)
	_, port, _ := net.SplitHostPort(addr)
	ports := []string{"--port", port}
	if tlsOnly {
		ports = []string{"--port", "0", "--tls-port", port}
	}
	all := append(append(ports, "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
		"--daemonize", "no", "--dir", t.TempDir(), "--logfile", ""), args...)
	cmd := exec.Command(bin, all...)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = cmd.Stdout
	if err := cmd.Start(); err != nil {
		t.Fatalf("start redis-server: %v", err)
	}
	var log strings.Builder
	logDone := make(chan struct{})
	go func() {
		defer close(logDone)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			log.WriteString(sc.Text() + "\n")
		}
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		testwait.Recv(t, logDone, testwait.Long, "the end of redis-server's output after it was killed")
		_ = cmd.Wait()
	})
	deadline := time.Now().Add(10 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
		if err == nil {
			_ = c.Close()
			return addr
		}
		if time.Now().After(deadline) {
			_ = cmd.Process.Kill()
			testwait.Recv(t, logDone, testwait.Long, "the end of redis-server's output after it was killed for not starting on "+addr)
			t.Fatalf("redis-server on %s did not start: %v\n%s", addr, err, log.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestRedisRequirePass: against a second redis-server started with
// --requirepass and an ACL user, a missing or wrong password fails at open
// with a clear, redacted error, and the right password (default user or ACL
// user) gives a working store.
func TestRedisRequirePass(t *testing.T) {
	t.Parallel()
	pass := "pw-" + storetestkit.Hex(12)
	alicePass := "alice-" + storetestkit.Hex(12)
	addr := startRedisServer(t, false, "--requirepass", pass,
		"--user", "alice", "on", ">"+alicePass, "~*", "+@all")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	wrong := "wrong-" + storetestkit.Hex(12)
	bad := []struct{ name, url, secret, want string }{
		{"no password", "redis://" + addr + "/0", "", "NOAUTH"},
		{"wrong password", "redis://:" + wrong + "@" + addr + "/0", wrong, "WRONGPASS"},
		{"wrong ACL password", "redis://alice:" + wrong + "@" + addr + "/0", wrong, "WRONGPASS"},
		{"unknown ACL user", "redis://mallory:" + pass + "@" + addr + "/0", pass, "WRONGPASS"},
	}
	for _, tc := range bad {
		t.Run("case="+tc.name, func(t *testing.T) {
			_, err := redisstore.Open(ctx, tc.url, redisstore.Options{})
			if err == nil {
				t.Fatal("open succeeded")
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %q does not name the cause %s", err, tc.want)
			}
			if tc.secret != "" && strings.Contains(err.Error(), tc.secret) {
				t.Errorf("error shows the password: %s", err)
			}
		})
	}

	good := []struct{ name, url string }{
		{"requirepass", "redis://:" + pass + "@" + addr + "/0"},
		{"ACL user", "redis://alice:" + alicePass + "@" + addr + "/1"},
	}
	for _, tc := range good {
		t.Run("case="+tc.name, func(t *testing.T) {
			s, err := idempotency.Open(ctx, tc.url, idempotency.Options{})
			if err != nil {
				t.Fatalf("open with the right password: %v", err)
			}
			defer s.Close()
			key := idempotency.Key{Namespace: "auth", ID: "1"}
			out, c, err := s.TryClaim(ctx, key)
			if err != nil || out != idempotency.Claimed {
				t.Fatalf("TryClaim = %v, %v", out, err)
			}
			if err := s.Confirm(ctx, c); err != nil {
				t.Fatal(err)
			}
			if out, _, err := s.TryClaim(ctx, key); err != nil || out != idempotency.AlreadyConfirmed {
				t.Fatalf("TryClaim after Confirm = %v, %v", out, err)
			}
		})
	}
}

// TestRedisTLS: a TLS-only redis-server that requires a password
// and a client certificate. rediss:// with the right CA, client certificate
// and password works (and a custom tls.Config turns TLS on even for
// redis://); the system roots, a wrong CA, a missing client certificate or
// a wrong password each fail at open with a clear, redacted error.
func TestRedisTLS(t *testing.T) {
	t.Parallel()
	pki := storetestkit.NewPKI(t)
	pass := "pw-" + storetestkit.Hex(12)
	addr := startRedisServer(t, true, "--requirepass", pass,
		"--tls-cert-file", pki.CertFile, "--tls-key-file", pki.KeyFile,
		"--tls-ca-cert-file", pki.CAFile, "--tls-auth-clients", "yes")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	good := &tls.Config{RootCAs: pki.Roots, Certificates: []tls.Certificate{pki.Client}, MinVersion: tls.VersionTLS12}
	wrongCA := &tls.Config{RootCAs: storetestkit.NewPKI(t).Roots, Certificates: []tls.Certificate{pki.Client}, MinVersion: tls.VersionTLS12}
	noClientCert := &tls.Config{RootCAs: pki.Roots, MinVersion: tls.VersionTLS12}
	wrong := "wrong-" + storetestkit.Hex(12)
	base := "rediss://:" + pass + "@" + addr + "/0?max_retries=-1"
	cases := []struct {
		name, url string
		cfg       *tls.Config
		want      string // "" means the store must work
	}{
		{"custom CA and client cert", base, good, ""},
		{"redis:// with a tls.Config", "redis://:" + pass + "@" + addr + "/0?max_retries=-1", good, ""},
		{"system roots", base, nil, "certificate"},
		{"wrong CA", base, wrongCA, "certificate"},
		{"no client certificate", base, noClientCert, "certificate"},
		{"wrong password", "rediss://:" + wrong + "@" + addr + "/0?max_retries=-1", good, "WRONGPASS"},
	}
	for _, tc := range cases {
		t.Run("case="+tc.name, func(t *testing.T) {
			s, err := redisstore.Open(ctx, tc.url, redisstore.Options{TLS: tc.cfg})
			if tc.want != "" {
				if err == nil {
					_ = s.Close()
					t.Fatal("open succeeded")
				}
				if !strings.Contains(err.Error(), tc.want) {
					t.Errorf("error %q does not name the cause (%s)", err, tc.want)
				}
				for _, secret := range []string{pass, wrong} {
					if strings.Contains(err.Error(), secret) {
						t.Errorf("error shows the password: %s", err)
					}
				}
				return
			}
			if err != nil {
				t.Fatalf("open: %v", err)
			}
			defer s.Close()
			key := idempotency.Key{Namespace: "tls", ID: storetestkit.Hex(4)}
			out, c, err := s.TryClaim(ctx, key)
			if err != nil || out != idempotency.Claimed {
				t.Fatalf("TryClaim = %v, %v", out, err)
			}
			if err := s.Confirm(ctx, c); err != nil {
				t.Fatal(err)
			}
			if ok, err := s.IsConfirmed(ctx, key); err != nil || !ok {
				t.Fatalf("IsConfirmed = %v, %v", ok, err)
			}
		})
	}
}

// A store on a client the application already has; the application keeps
// owning the client. (Compile-only: it needs a Redis server.)
func ExampleNew() {
	ctx := context.Background()
	client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"})
	defer client.Close()
	store, err := redisstore.New(ctx, client, redisstore.Options{Options: idempotency.Options{ClaimTTL: time.Minute}, Prefix: "orders:idempotency:"})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer store.Close() // leaves client open

	out, claim, err := store.TryClaim(ctx, idempotency.Key{Namespace: "orders", ID: "ID:host-1-2-3:1:1:1:42"})
	switch {
	case err != nil:
		fmt.Println("store unavailable, hand the message back:", err)
	case out == idempotency.Claimed:
		// ... handle the message, then:
		_ = store.Confirm(ctx, claim)
	case out == idempotency.AlreadyConfirmed:
		// a duplicate of finished work: acknowledge it
	case out == idempotency.InProgress:
		// someone else holds it: hand the message back, never acknowledge
	}
}

// A store opened by URL owns its connection; TLS with a private CA comes
// as a tls.Config. (Compile-only: it needs a Redis server.)
func ExampleOpen() {
	ctx := context.Background()
	roots := x509.NewCertPool() // add the CA that signed the server's certificate
	store, err := redisstore.Open(ctx, "rediss://consumer:secret@redis.internal:6380/0?msgaudit_prefix=orders:", redisstore.Options{TLS: &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12}})
	if err != nil {
		fmt.Println(err) // never shows "secret"
		return
	}
	defer store.Close() // closes the connection it opened
}

// TestRedisHungServer: against a server that never answers, a context
// deadline ends every operation with an error that matches
// context.DeadlineExceeded, never a verdict; redisstore.Open likewise.
func TestRedisHungServer(t *testing.T) {
	t.Parallel()
	addr := storetestkit.SilentServer(t)
	client := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = client.Close() })
	s, err := redisstore.New(context.Background(), client, redisstore.Options{Prefix: "p:"})
	if err != nil {
		t.Fatal(err)
	}
	key := idempotency.Key{Namespace: "n", ID: "1"}
	c := idempotency.Claim{Key: key, Token: "t"}
	ops := map[string]func(ctx context.Context) error{
		"TryClaim":    func(ctx context.Context) error { _, _, err := s.TryClaim(ctx, key); return err },
		"Claim":       func(ctx context.Context) error { _, _, err := redisstore.Claim(ctx, s, key); return err },
		"IsConfirmed": func(ctx context.Context) error { _, err := s.IsConfirmed(ctx, key); return err },
		"Confirm":     func(ctx context.Context) error { return s.Confirm(ctx, c) },
		"Release":     func(ctx context.Context) error { return s.Release(ctx, c) },
		"Renew":       func(ctx context.Context) error { _, err := s.Renew(ctx, c); return err },
		"redisstore.Open": func(ctx context.Context) error {
			_, err := redisstore.Open(ctx, "redis://:pw@"+addr+"/0?max_retries=-1", redisstore.Options{})
			return err
		},
	}
	for name, op := range ops {
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		err := op(ctx)
		cancel()
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("%s on a hung server: %v, want an error matching context.DeadlineExceeded", name, err)
		}
	}
}

// TestRedactionProperty: for any password, well-formed in the URL or
// pasted in raw, the errors of a failing redisstore.Open or pgstore.Open
// never contain it, raw or in any of its escaped forms. The failures used
// need no I/O (a closed PostgreSQL port fails at once; the Redis URLs are
// refused while parsing), so many passwords can be tried.
func TestRedactionProperty(t *testing.T) {
	t.Parallel()
	ctx := testwait.Context(t, time.Minute)
	addr := storetestkit.ClosedAddr(t)
	rapid.Check(t, func(rt *rapid.T) {
		// A marker on both ends makes the password unmistakable in error
		// text; the middle is any printable ASCII, specials included.
		mid := rapid.StringOfN(rapid.RuneFrom(nil, &unicode.RangeTable{R16: []unicode.Range16{{Lo: 0x21, Hi: 0x7e, Stride: 1}}}), 0, 24, -1).Draw(rt, "mid")
		pw := "Qz9" + mid + "Qz9"
		escaped := url.UserPassword("user", pw).String() // user:ESCAPED
		raw := "user:" + pw
		forms := []string{pw, url.PathEscape(pw), url.QueryEscape(pw), strings.TrimPrefix(escaped, "user:")}
		var urls []string
		for _, ui := range []string{escaped, raw} {
			urls = append(urls,
				"redis://"+ui+"@"+addr+"/notadb",
				"redis://"+ui+"@"+addr+"/0?bogus_option=1",
				"postgres://"+ui+"@"+addr+"/test?sslmode=disable",
				"postgres://postgres@"+addr+"/test?sslmode=disable&password="+url.QueryEscape(pw),
			)
		}
		for _, u := range urls {
			var err error
			if strings.HasPrefix(u, "redis") {
				_, err = redisstore.Open(ctx, u, redisstore.Options{})
			} else {
				_, err = pgstore.Open(ctx, u, pgstore.Options{})
			}
			if err == nil {
				rt.Fatalf("open %q succeeded", u)
			}
			text := err.Error() + " " + fmt.Sprintf("%+v", err)
			// A raw password with '@', '/', '?' or '#' changes how the URL
			// splits, so only part of it is in the password position; check
			// the well-formed URLs strictly and the raw ones for the
			// password as the parser saw it.
			check := forms
			if strings.Contains(u, raw+"@") && strings.ContainsAny(pw, "@/?#") {
				continue
			}
			for _, f := range check {
				if strings.Contains(text, f) {
					rt.Fatalf("error for %q shows the password (as %q): %s", u, f, text)
				}
			}
		}
	})
}
