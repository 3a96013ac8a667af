package metadata_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/acemq/msgaudit/internal/testenv"
	"github.com/acemq/msgaudit/internal/testwait"
	"github.com/acemq/msgaudit/metadata"
	"github.com/acemq/msgaudit/metadata/pgmeta"
	"github.com/acemq/msgaudit/metadata/redismeta"
	"github.com/acemq/msgaudit/metadata/sqlitemeta"
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

func TestSQLiteConformance(t *testing.T) {
	t.Parallel()
	storetest.Run(t, func(t *testing.T) storetest.Opener {
		path := filepath.Join(t.TempDir(), "meta.db")
		return func(t *testing.T) metadata.Store {
			s, err := sqlitemeta.Open(context.Background(), path)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { s.Close() })
			return s
		}
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

func TestRedisConformance(t *testing.T) {
	t.Parallel()
	admin := redisClient(t)
	storetest.Run(t, func(t *testing.T) storetest.Opener {
		prefix := randomName(t) + ":"
		t.Cleanup(func() { deletePrefix(t, admin, prefix) })
		return func(t *testing.T) metadata.Store {
			// A client of its own, as another process would have.
			s, err := redismeta.New(redisClient(t), prefix)
			if err != nil {
				t.Fatal(err)
			}
			return s
		}
	})
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

func newPostgresTable(t *testing.T, pool *pgxpool.Pool) string {
	t.Helper()
	table := randomName(t)
	s, err := pgmeta.New(pool, table)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Migrate(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if _, err := pool.Exec(context.Background(), "DROP TABLE IF EXISTS "+table); err != nil {
			t.Errorf("cleanup: %v", err)
		}
	})
	return table
}

func TestPostgresConformance(t *testing.T) {
	t.Parallel()
	pool := postgresPool(t)
	storetest.Run(t, func(t *testing.T) storetest.Opener {
		table := newPostgresTable(t, pool)
		return func(t *testing.T) metadata.Store {
			s, err := pgmeta.New(pool, table)
			if err != nil {
				t.Fatal(err)
			}
			if err := s.Migrate(context.Background()); err != nil { // idempotent
				t.Fatal(err)
			}
			return s
		}
	})
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
		if got := metadata.RedactURL(tc.in); got != tc.want {
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
			t.Fatalf("Open(%s) succeeded against a closed port", metadata.RedactURL(u))
		}
		if strings.Contains(err.Error(), secret) {
			t.Errorf("Open error reveals the password: %v", err)
		}
	}

	// Stores built on clients that cannot connect: every operation errors.
	rc := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1})
	defer rc.Close()
	rs, _ := redismeta.New(rc, "p:")
	cfg, err := pgxpool.ParseConfig("postgres://postgres@127.0.0.1:1/test?sslmode=disable&connect_timeout=2")
	if err != nil {
		t.Fatal(err)
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	ps, _ := pgmeta.New(pool, "t")
	for name, s := range map[string]metadata.Store{"redis": rs, "postgres": ps} {
		if _, _, err := s.Get(ctx, "k"); err == nil {
			t.Errorf("%s Get: no error", name)
		}
		if _, stored, err := s.PutIfAbsent(ctx, "k", "v"); err == nil || stored {
			t.Errorf("%s PutIfAbsent = %v, %v; want error, not stored", name, stored, err)
		}
		if ok, err := s.Replace(ctx, "k", "v", "w"); err == nil || ok {
			t.Errorf("%s Replace = %v, %v; want error", name, ok, err)
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

func TestNewArguments(t *testing.T) {
	t.Parallel()
	if _, err := redismeta.New(nil, "p"); err == nil {
		t.Error("redismeta.New(nil) succeeded")
	}
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	defer c.Close()
	if _, err := redismeta.New(c, ""); !errors.Is(err, metadata.ErrInvalidName) {
		t.Errorf("redismeta.New(empty prefix) = %v; want ErrInvalidName", err)
	}
	for _, name := range []string{"", "1abc", "a.b.c", "a b", `a"b`, strings.Repeat("x", 64)} {
		if _, err := pgmeta.New(&pgxpool.Pool{}, name); !errors.Is(err, metadata.ErrInvalidName) {
			t.Errorf("pgmeta.New(%q) = %v; want ErrInvalidName", name, err)
		}
		if _, err := sqlitemeta.New(nil, name); err == nil {
			t.Errorf("sqlitemeta.New(nil, %q) succeeded", name)
		}
	}
	for _, name := range []string{"t", "public.t", "_x9", strings.Repeat("x", 63)} {
		if _, err := pgmeta.New(&pgxpool.Pool{}, name); err != nil {
			t.Errorf("pgmeta.New(%q) = %v", name, err)
		}
	}
}

func BenchmarkStore(b *testing.B) {
	ctx := context.Background()
	backends := []struct {
		name string
		open func(b *testing.B) metadata.Store
	}{
		{"memory", func(b *testing.B) metadata.Store { return metadata.NewMemory() }},
		{"sqlite", func(b *testing.B) metadata.Store {
			s, err := sqlitemeta.Open(ctx, filepath.Join(b.TempDir(), "bench.db"))
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { s.Close() })
			return s
		}},
		{"redis", func(b *testing.B) metadata.Store {
			c := redisClient(b)
			prefix := randomName(b) + ":"
			b.Cleanup(func() { deletePrefix(b, c, prefix) })
			s, _ := redismeta.New(c, prefix)
			return s
		}},
		{"postgres", func(b *testing.B) metadata.Store {
			pool := postgresPool(b)
			table := randomName(b)
			s, _ := pgmeta.New(pool, table)
			if err := s.Migrate(ctx); err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { pool.Exec(context.Background(), "DROP TABLE IF EXISTS "+table) })
			return s
		}},
	}
	for _, be := range backends {
		b.Run("backend="+be.name+"/op=get", func(b *testing.B) {
			s := be.open(b)
			s.PutIfAbsent(ctx, "k", "0")
			b.ReportAllocs()
			for b.Loop() {
				if _, _, err := s.Get(ctx, "k"); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run("backend="+be.name+"/op=replace", func(b *testing.B) {
			s := be.open(b)
			s.PutIfAbsent(ctx, "k", "0")
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				ok, err := s.Replace(ctx, "k", strconv.Itoa(i), strconv.Itoa(i+1))
				if err != nil || !ok {
					b.Fatal(ok, err)
				}
				i++
			}
		})
		b.Run("backend="+be.name+"/op=put-if-absent", func(b *testing.B) {
			s := be.open(b)
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				if _, stored, err := s.PutIfAbsent(ctx, strconv.Itoa(i), "v"); err != nil || !stored {
					b.Fatal(stored, err)
				}
				i++
			}
		})
	}
}
