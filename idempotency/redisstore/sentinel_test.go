package redisstore_test

import (
	"context"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/acemq/msgaudit/idempotency"
	"github.com/acemq/msgaudit/idempotency/redisstore"
	"github.com/acemq/msgaudit/idempotency/storetest"
	"github.com/acemq/msgaudit/internal/claimkit"
	"github.com/acemq/msgaudit/internal/testkit/storetestkit"
	"github.com/acemq/msgaudit/internal/testkit/testwait"
)

// startSentinel runs a private Redis Sentinel on a free loopback port that
// monitors the master at masterAddr under the name master, waits until it
// names that master and kills it at cleanup. It returns its address.
func startSentinel(t testing.TB, master, masterAddr string) string {
	t.Helper()
	bin := redisServerBinary(t)
	addr := storetestkit.ClosedAddr(t)
	_, port, _ := net.SplitHostPort(addr)
	mhost, mport, _ := net.SplitHostPort(masterAddr)
	dir := t.TempDir()
	conf := filepath.Join(dir, "sentinel.conf")
	text := "port " + port + "\nbind 127.0.0.1\ndir " + dir + "\nsentinel monitor " + master + " " + mhost + " " + mport + " 1\n"
	if err := os.WriteFile(conf, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, conf, "--sentinel")
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatalf("start redis sentinel: %v", err)
	}
	var once sync.Once
	stop := func() { once.Do(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }) }
	t.Cleanup(stop)
	c := redis.NewSentinelClient(&redis.Options{Addr: addr, MaxRetries: -1, DialTimeout: time.Second})
	defer c.Close()
	deadline := time.Now().Add(20 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		got, err := c.GetMasterAddrByName(ctx, master).Result()
		cancel()
		if err == nil && len(got) == 2 && net.JoinHostPort(got[0], got[1]) == masterAddr {
			return addr
		}
		if time.Now().After(deadline) {
			stop()
			t.Fatalf("sentinel on %s does not name master %s at %s: %v %v\n%s", addr, master, masterAddr, got, err, out.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestSentinelConformance runs the shared store suite on a master found
// through Redis Sentinel: a private redis-server and a Sentinel monitoring
// it, every store opened by a redis+sentinel:// URL naming the Sentinel
// (twice, as a list) and the master, on its own prefix.
func TestSentinelConformance(t *testing.T) {
	t.Parallel()
	masterAddr := startRedisServer(t, false)
	sentinel := startSentinel(t, "msgaudit", masterAddr)
	raw := "redis+sentinel://" + sentinel + "," + sentinel + "/msgaudit/0"
	admin := redis.NewClient(&redis.Options{Addr: masterAddr})
	t.Cleanup(func() { _ = admin.Close() })
	var prefixes sync.Map // *redisstore.Store → its prefix
	open := func(t *testing.T, prefix string, o idempotency.Options) *redisstore.Store {
		s, err := redisstore.Open(testwait.Context(t, time.Minute), raw+"?msgaudit_prefix="+url.QueryEscape(prefix), redisstore.Options{Options: o})
		if err != nil {
			t.Fatalf("open through the sentinel: %v", err)
		}
		return s
	}
	storetest.Run(t, func(t *testing.T, o idempotency.Options) idempotency.Store {
		prefix := "msgaudit-test:" + storetestkit.Hex(8) + ":"
		s := open(t, prefix, o)
		t.Cleanup(func() { _ = s.Close() })
		prefixes.Store(s, prefix)
		return s
	}, storetest.Capabilities{
		ServerTime: true,
		Reopen: func(t *testing.T, old idempotency.Store, o idempotency.Options) idempotency.Store {
			prefix, ok := prefixes.Load(old)
			if !ok {
				t.Fatalf("Reopen of a store the test did not open: %T", old)
			}
			return open(t, prefix.(string), o)
		},
	})
	// The keys are on the master the Sentinel named.
	s := open(t, "where:", idempotency.Options{})
	defer s.Close()
	ctx := testwait.Context(t, time.Minute)
	key := idempotency.Key{Namespace: "n", ID: "1"}
	if out, _, err := s.TryClaim(ctx, key); err != nil || out != idempotency.Claimed {
		t.Fatalf("TryClaim = %v, %v", out, err)
	}
	if n := admin.Exists(ctx, "where:"+claimkit.StorageKey(key, 0)).Val(); n != 1 {
		t.Fatal("the claimed key is not on the master")
	}
	// A master the Sentinel does not know fails at open, and the error
	// does not show the password.
	const pw = "Sentinel5ecret"
	bad, err := redisstore.Open(ctx, "redis+sentinel://:"+pw+"@"+sentinel+"/nosuchmaster?max_retries=-1", redisstore.Options{})
	if err == nil {
		_ = bad.Close()
		t.Fatal("open of an unknown master succeeded")
	}
	if strings.Contains(err.Error(), pw) {
		t.Errorf("error shows the password: %v", err)
	}
	t.Logf("unknown master: %v", err)
}
