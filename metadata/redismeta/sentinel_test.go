package redismeta_test

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

	"github.com/acemq/msgaudit/internal/testkit/storetestkit"
	"github.com/acemq/msgaudit/internal/testkit/testenv"
	"github.com/acemq/msgaudit/internal/testkit/testwait"
	"github.com/acemq/msgaudit/metadata"
	"github.com/acemq/msgaudit/metadata/storetest"
)

// startProcess runs redis-server with args (a Sentinel when sentinel is
// set), kills it at cleanup, and waits until ready(ctx) holds.
func startProcess(t *testing.T, args []string, ready func(context.Context) bool) {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	testenv.Require(t, err == nil, "redis-server not found (the Sentinel test starts its own)", "apt-get install redis-server")
	cmd := exec.Command(bin, args...)
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatalf("start redis-server %v: %v", args, err)
	}
	var once sync.Once
	stop := func() { once.Do(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }) }
	t.Cleanup(stop)
	deadline := time.Now().Add(20 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		ok := ready(ctx)
		cancel()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			stop()
			t.Fatalf("redis-server %v did not become ready:\n%s", args, out.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestSentinelConformance runs the metadata conformance suite on a master
// found through Redis Sentinel: a private redis-server and a Sentinel
// monitoring it as "msgaudit", every store opened by metadata.Open with a
// redis+sentinel:// URL.
func TestSentinelConformance(t *testing.T) {
	t.Parallel()
	masterAddr := storetestkit.ClosedAddr(t)
	_, mport, _ := net.SplitHostPort(masterAddr)
	master := redis.NewClient(&redis.Options{Addr: masterAddr, MaxRetries: -1})
	t.Cleanup(func() { _ = master.Close() })
	startProcess(t, []string{"--port", mport, "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", t.TempDir()},
		func(ctx context.Context) bool { return master.Ping(ctx).Err() == nil })

	sentAddr := storetestkit.ClosedAddr(t)
	_, sport, _ := net.SplitHostPort(sentAddr)
	dir := t.TempDir()
	conf := filepath.Join(dir, "sentinel.conf")
	if err := os.WriteFile(conf, []byte("port "+sport+"\nbind 127.0.0.1\ndir "+dir+"\nsentinel monitor msgaudit 127.0.0.1 "+mport+" 1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	sent := redis.NewSentinelClient(&redis.Options{Addr: sentAddr, MaxRetries: -1})
	t.Cleanup(func() { _ = sent.Close() })
	startProcess(t, []string{conf, "--sentinel"}, func(ctx context.Context) bool {
		got, err := sent.GetMasterAddrByName(ctx, "msgaudit").Result()
		return err == nil && len(got) == 2 && net.JoinHostPort(got[0], got[1]) == masterAddr
	})

	raw := "redis+sentinel://" + sentAddr + "/msgaudit/0"
	storetest.Run(t, func(t *testing.T) storetest.Opener {
		prefix := "mdtest_" + storetestkit.Hex(6) + ":"
		u := raw + "?msgaudit_prefix=" + url.QueryEscape(prefix)
		return func(t *testing.T) metadata.Store {
			s, err := metadata.Open(testwait.Context(t, time.Minute), u)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = s.Close() })
			return s
		}
	})
	// The stores wrote to the master the Sentinel named.
	t.Cleanup(func() {
		if n := master.DBSize(context.Background()).Val(); n == 0 {
			t.Error("the master holds no key: the stores did not write through the Sentinel's master")
		}
	})
}
