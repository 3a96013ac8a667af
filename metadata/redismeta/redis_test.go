package redismeta_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/acemq/msgaudit/internal/testkit/storetestkit"
	"github.com/acemq/msgaudit/internal/testkit/testenv"
	"github.com/acemq/msgaudit/internal/testkit/testwait"
	"github.com/acemq/msgaudit/metadata"
	"github.com/acemq/msgaudit/metadata/redismeta"
	"github.com/acemq/msgaudit/metadata/storetest"
)

// redisClient returns a client on MSGAUDIT_REDIS_URL, skipping the test
// when it is unset (failing under CI).
func redisClient(t testing.TB) *redis.Client {
	t.Helper()
	opt, err := redis.ParseURL(testenv.Getenv(t, "MSGAUDIT_REDIS_URL", "the real service"))
	if err != nil {
		t.Fatal(err)
	}
	c := redis.NewClient(opt)
	t.Cleanup(func() { c.Close() })
	return c
}

// newPrefix returns a key prefix of the test's own and removes every key
// under it when the test ends.
func newPrefix(t testing.TB, admin *redis.Client) string {
	prefix := "mdtest_" + storetestkit.Hex(6) + ":"
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		iter := admin.Scan(ctx, 0, prefix+"*", 500).Iterator()
		var keys []string
		for iter.Next(ctx) {
			keys = append(keys, iter.Val())
		}
		if err := iter.Err(); err != nil {
			t.Errorf("cleanup scan %s: %v", prefix, err)
			return
		}
		if len(keys) > 0 {
			if err := admin.Del(ctx, keys...).Err(); err != nil {
				t.Errorf("cleanup del %s: %v", prefix, err)
			}
		}
	})
	return prefix
}

// TestConformance runs the metadata conformance suite on a key prefix of
// its own; every reopen is a new client, as another process would have.
func TestConformance(t *testing.T) {
	t.Parallel()
	admin := redisClient(t)
	storetest.Run(t, func(t *testing.T) storetest.Opener {
		prefix := newPrefix(t, admin)
		return func(t *testing.T) metadata.Store {
			s, err := redismeta.New(context.Background(), redisClient(t), redismeta.Options{Prefix: prefix})
			if err != nil {
				t.Fatal(err)
			}
			return s
		}
	})
}

// TestNewArguments: a nil client is refused at construction; an empty
// prefix means the default one.
func TestNewArguments(t *testing.T) {
	t.Parallel()
	if _, err := redismeta.New(context.Background(), nil, redismeta.Options{Prefix: "p"}); err == nil {
		t.Error("redismeta.New(nil) succeeded")
	}
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	defer c.Close()
	if _, err := redismeta.New(context.Background(), c, redismeta.Options{}); err != nil {
		t.Errorf("redismeta.New(empty prefix, the default) = %v", err)
	}
}

// TestUnreachable: a store on a client that cannot connect answers every
// operation with an error, never a result.
func TestUnreachable(t *testing.T) {
	t.Parallel()
	ctx := testwait.Context(t, time.Minute)
	rc := redis.NewClient(&redis.Options{Addr: storetestkit.ClosedAddr(t), MaxRetries: -1})
	defer rc.Close()
	s, err := redismeta.New(context.Background(), rc, redismeta.Options{Prefix: "p:"})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.Get(ctx, "k"); err == nil {
		t.Error("Get: no error")
	}
	if _, stored, err := s.PutIfAbsent(ctx, "k", "v"); err == nil || stored {
		t.Errorf("PutIfAbsent = %v, %v; want error, not stored", stored, err)
	}
	if ok, err := s.Replace(ctx, "k", "v", "w"); err == nil || ok {
		t.Errorf("Replace = %v, %v; want error", ok, err)
	}
}

func BenchmarkStore(b *testing.B) {
	admin := redisClient(b)
	storetest.Bench(b, func(b *testing.B) metadata.Store {
		s, err := redismeta.New(context.Background(), admin, redismeta.Options{Prefix: newPrefix(b, admin)})
		if err != nil {
			b.Fatal(err)
		}
		return s
	})
}
