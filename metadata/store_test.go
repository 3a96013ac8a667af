package metadata_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/acemq/msgaudit/internal/redact"
	"github.com/acemq/msgaudit/internal/testkit/testenv"
	"github.com/acemq/msgaudit/internal/testkit/testwait"
	"github.com/acemq/msgaudit/metadata"
	"github.com/acemq/msgaudit/metadata/storetest"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"
)

// serviceURL returns the URL in the environment variable name, skipping the
// test when it is unset, except under CI=true where a missing service fails.
func serviceURL(t testing.TB, name string) string {
	t.Helper()
	return testenv.Getenv(t, name, "the real service")
}

func randomName(t testing.TB) string {
	var b [6]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatal(err)
	}
	return "mdtest_" + hex.EncodeToString(b[:])
}

func TestMemoryConformance(t *testing.T) {
	t.Parallel()
	storetest.Run(t, func(t *testing.T) storetest.Opener {
		s := metadata.NewMemory()
		t.Cleanup(func() { s.Close() })
		// One process: every "reopen" is the same store object.
		return func(t *testing.T) metadata.Store { return s }
	})
}

func redisClient(t testing.TB) *redis.Client {
	t.Helper()
	opt, err := redis.ParseURL(serviceURL(t, "MSGAUDIT_REDIS_URL"))
	if err != nil {
		t.Fatal(err)
	}
	c := redis.NewClient(opt)
	t.Cleanup(func() { c.Close() })
	return c
}

// deletePrefix removes every key under prefix.
func deletePrefix(t testing.TB, c *redis.Client, prefix string) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	iter := c.Scan(ctx, 0, prefix+"*", 500).Iterator()
	var keys []string
	for iter.Next(ctx) {
		keys = append(keys, iter.Val())
	}
	if err := iter.Err(); err != nil {
		t.Errorf("cleanup scan %s: %v", prefix, err)
		return
	}
	if len(keys) > 0 {
		if err := c.Del(ctx, keys...).Err(); err != nil {
			t.Errorf("cleanup del %s: %v", prefix, err)
		}
	}
}

var (
	pgOnce sync.Once
	pgPool *pgxpool.Pool
	pgErr  error
)

// postgresPool returns one pool shared by the package's tests (each test
// uses its own table), closed by TestMain.
func postgresPool(t testing.TB) *pgxpool.Pool {
	t.Helper()
	u := serviceURL(t, "MSGAUDIT_POSTGRES_URL")
	pgOnce.Do(func() {
		cfg, err := pgxpool.ParseConfig(u)
		if err != nil {
			pgErr = err
			return
		}
		cfg.MaxConns = 8
		pgPool, pgErr = pgxpool.NewWithConfig(context.Background(), cfg)
	})
	if pgErr != nil {
		t.Fatal(pgErr)
	}
	return pgPool
}

func TestMain(m *testing.M) {
	code := m.Run()
	if pgPool != nil {
		pgPool.Close()
	}
	os.Exit(code)
}

func TestStorageKey(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("a", metadata.MaxKeyLen+1)
	for _, tc := range []struct {
		key      string
		verbatim bool
		err      error
	}{
		{"", false, metadata.ErrInvalidKey},
		{"a", true, nil},
		{strings.Repeat("a", metadata.MaxKeyLen), true, nil},
		{long, false, nil},
		{"\xff", false, nil},
		{"\xfe", true, nil},
	} {
		got, err := metadata.StorageKey(tc.key)
		if !errors.Is(err, tc.err) {
			t.Errorf("StorageKey(len %d) error = %v; want %v", len(tc.key), err, tc.err)
			continue
		}
		if err != nil {
			continue
		}
		if (got == tc.key) != tc.verbatim {
			t.Errorf("StorageKey(len %d) verbatim = %v; want %v", len(tc.key), got == tc.key, tc.verbatim)
		}
		if !tc.verbatim && (len(got) != 33 || got[0] != 0xFF) {
			t.Errorf("StorageKey(len %d) = %d bytes starting %#x; want 0xFF + 32-byte digest", len(tc.key), len(got), got[0])
		}
	}
	h1, _ := metadata.StorageKey(long)
	h2, _ := metadata.StorageKey(h1)
	if h1 == h2 {
		t.Error("a key equal to another key's hashed form maps to the same storage key")
	}
}

func TestRedactURL(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ in, want string }{
		{"redis://user:s3cret@127.0.0.1:6379/0", "redis://user:xxxxx@127.0.0.1:6379/0"},
		{"rediss://:s3cret@h:6380/1?msgaudit_prefix=p", "rediss://:xxxxx@h:6380/1?msgaudit_prefix=p"},
		{"postgres://u:s3cret@h/db?sslmode=verify-full", "postgres://u:xxxxx@h/db?sslmode=verify-full"},
		{"postgres://u@h/db?password=s3cret", "postgres://u@h/db?password=xxxxx"},
		{"redis://127.0.0.1:6379/0", "redis://127.0.0.1:6379/0"},
		{"memory", "memory"},
		{"u:s3cret@h/x y", "u:(redacted)"},
		{"redis:u:s3cret@h:6379", "redis:(redacted)"},
	} {
		if got := redact.Strict(tc.in); got != tc.want {
			t.Errorf("RedactURL(%q) = %q; want %q", tc.in, got, tc.want)
		}
	}
}

func TestOpen(t *testing.T) {
	t.Parallel()
	ctx := testwait.Context(t, time.Minute)
	dir := t.TempDir()
	type tc struct {
		name string
		url  string
		err  error // nil: must open and work
	}
	cases := []tc{
		{"memory", "memory", nil},
		{"sqlite", "sqlite:" + filepath.Join(dir, "a.db"), nil},
		{"sqlite-slashes-table", "sqlite://" + filepath.Join(dir, "b.db") + "?msgaudit_table=custom_t", nil},
		{"sqlite-bad-table", "sqlite:" + filepath.Join(dir, "c.db") + "?msgaudit_table=x-drop", metadata.ErrInvalidName},
		{"unsupported", "mongodb://h/db", metadata.ErrUnsupportedURL},
		{"empty", "", metadata.ErrUnsupportedURL},
		{"redis-bad-option", "redis://:pw@127.0.0.1:6379/0?bogus=1", metadata.ErrUnsupportedURL},
		{"postgres-bad-table", "postgres://postgres@127.0.0.1:1/test?msgaudit_table=a-b", metadata.ErrInvalidName},
	}
	if u := os.Getenv("MSGAUDIT_REDIS_URL"); u != "" || testenv.InCI() {
		u = serviceURL(t, "MSGAUDIT_REDIS_URL")
		prefix := randomName(t) + ":"
		t.Cleanup(func() { deletePrefix(t, redisClient(t), prefix) })
		cases = append(cases, tc{"redis", u + sep(u) + "msgaudit_prefix=" + prefix, nil})
	}
	if u := os.Getenv("MSGAUDIT_POSTGRES_URL"); u != "" || testenv.InCI() {
		u = serviceURL(t, "MSGAUDIT_POSTGRES_URL")
		table := randomName(t)
		t.Cleanup(func() {
			postgresPool(t).Exec(context.Background(), "DROP TABLE IF EXISTS "+table)
		})
		cases = append(cases, tc{"postgres", u + sep(u) + "msgaudit_table=" + table, nil})
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s, err := metadata.Open(ctx, c.url)
			if c.err != nil {
				if !errors.Is(err, c.err) {
					t.Fatalf("Open error = %v; want %v", err, c.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if _, stored, err := s.PutIfAbsent(ctx, "k", "v"); err != nil || !stored {
				t.Fatalf("PutIfAbsent = %v, %v", stored, err)
			}
			if ok, err := s.Replace(ctx, "k", "v", "w"); err != nil || !ok {
				t.Fatalf("Replace = %v, %v", ok, err)
			}
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			if c.name == "memory" {
				return
			}
			// Durable: a second Open sees the value.
			s2, err := metadata.Open(ctx, c.url)
			if err != nil {
				t.Fatal(err)
			}
			defer s2.Close()
			if v, ok, err := s2.Get(ctx, "k"); err != nil || !ok || v != "w" {
				t.Fatalf("after reopen Get = %q, %v, %v; want w", v, ok, err)
			}
		})
	}
}

func sep(u string) string {
	if strings.Contains(u, "?") {
		return "&"
	}
	return "?"
}

// TestUnreachable: a server that does not answer gives errors, never a
// result, and the password never appears in them.
func TestUnreachable(t *testing.T) {
	t.Parallel()
	ctx := testwait.Context(t, time.Minute)
	const secret = "hunter2-s3cret"
	for _, u := range []string{
		"redis://user:" + secret + "@127.0.0.1:1/0?max_retries=-1",
		"rediss://:" + secret + "@127.0.0.1:1/0?max_retries=-1",
		"postgres://postgres:" + secret + "@127.0.0.1:1/test?sslmode=disable&connect_timeout=2",
		"postgres://postgres@127.0.0.1:1/test?password=" + secret,
	} {
		_, err := metadata.Open(ctx, u)
		if err == nil {
			t.Fatalf("Open(%s) succeeded against a closed port", redact.Strict(u))
		}
		if strings.Contains(err.Error(), secret) {
			t.Errorf("Open error reveals the password: %v", err)
		}
	}
}

func TestMemoryClosed(t *testing.T) {
	t.Parallel()
	s := metadata.NewMemory()
	s.Close()
	if _, _, err := s.Get(context.Background(), "k"); !errors.Is(err, metadata.ErrClosed) {
		t.Errorf("Get after Close = %v; want ErrClosed", err)
	}
}

func BenchmarkStore(b *testing.B) {
	storetest.Bench(b, func(b *testing.B) metadata.Store { return metadata.NewMemory() })
}
