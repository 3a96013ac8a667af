package pgstore_test

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/acemq/msgaudit/internal/testkit/storetestkit"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/acemq/msgaudit/idempotency"
	"github.com/acemq/msgaudit/idempotency/pgstore"
	"github.com/acemq/msgaudit/idempotency/storetest"
	"github.com/acemq/msgaudit/internal/claimkit"
	"github.com/acemq/msgaudit/internal/testkit/testenv"
	"github.com/acemq/msgaudit/internal/testkit/testwait"
)

// postgresTestURL returns MSGAUDIT_POSTGRES_URL, skipping the test when it is
// unset (failing it in CI).
func postgresTestURL(t testing.TB) string {
	t.Helper()
	return testenv.Getenv(t, "MSGAUDIT_POSTGRES_URL", "the PostgreSQL store tests need a server")
}

// pgCounter is a pgx tracer that counts queries (each Query, QueryRow or Exec
// call) and statement preparations.
type pgCounter struct {
	queries, prepares atomic.Int64
	noSQL             bool // do not keep the SQL texts (benchmarks)
	mu                sync.Mutex
	sqls              []string
}

func (c *pgCounter) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	c.queries.Add(1)
	if c.noSQL {
		return ctx
	}
	c.mu.Lock()
	c.sqls = append(c.sqls, d.SQL)
	c.mu.Unlock()
	return ctx
}

func (c *pgCounter) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

func (c *pgCounter) TracePrepareStart(ctx context.Context, _ *pgx.Conn, _ pgx.TracePrepareStartData) context.Context {
	c.prepares.Add(1)
	return ctx
}

func (c *pgCounter) TracePrepareEnd(context.Context, *pgx.Conn, pgx.TracePrepareEndData) {}

// postgresTestPool opens a pool on MSGAUDIT_POSTGRES_URL (with tracer, when
// not nil, and at most maxConns connections when > 0) and returns it with a
// fresh table name. At cleanup the table is dropped and the pool closed.
func postgresTestPool(t testing.TB, tracer pgx.QueryTracer, maxConns int32) (*pgxpool.Pool, string) {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(postgresTestURL(t))
	if err != nil {
		t.Fatalf("MSGAUDIT_POSTGRES_URL: %v", err)
	}
	if tracer != nil {
		cfg.ConnConfig.Tracer = tracer
	}
	if maxConns > 0 {
		cfg.MaxConns = maxConns
	}
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatalf("pgxpool: %v", err)
	}
	table := "msgaudit_test_" + storetestkit.Hex(8)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if _, err := pool.Exec(ctx, `DROP TABLE IF EXISTS `+pgx.Identifier{table}.Sanitize()); err != nil {
			t.Errorf("cleanup: drop %s: %v", table, err)
		}
		pool.Close()
	})
	return pool, table
}

// newPostgresTestStore returns a migrated store on its own table.
func newPostgresTestStore(t testing.TB, o idempotency.Options, tracer pgx.QueryTracer, maxConns int32) (*pgstore.Store, *pgxpool.Pool, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	pool, table := postgresTestPool(t, tracer, maxConns)
	p, err := pgstore.New(ctx, pool, pgstore.Options{Options: o, Table: table})
	if err != nil {
		t.Fatalf("pgstore.New: %v", err)
	}
	if err := p.Migrate(ctx); err != nil {
		t.Fatalf("Migrate: %v", err)
	}
	t.Cleanup(func() { _ = p.Close() })
	return p, pool, table
}

// TestPostgresConformance runs the shared store suite against the
// PostgreSQL server: every store on its own table; a restart is a new pool
// and store opened by URL on the same table.
func TestPostgresConformance(t *testing.T) {
	raw := postgresTestURL(t)
	var tables sync.Map // *pgstore.Store → its table
	storetest.Run(t, func(t *testing.T, o idempotency.Options) idempotency.Store {
		s, _, table := newPostgresTestStore(t, o, nil, 8)
		tables.Store(s, table)
		return s
	}, storetest.Capabilities{
		ServerTime: true,
		Reopen: func(t *testing.T, old idempotency.Store, o idempotency.Options) idempotency.Store {
			table, ok := tables.Load(old)
			if !ok {
				t.Fatalf("Reopen of a store the test did not open: %T", old)
			}
			s, err := pgstore.Open(testwait.Context(t, time.Minute), storetestkit.WithQuery(raw, "msgaudit_table="+table.(string)), pgstore.Options{Options: o})
			if err != nil {
				t.Fatalf("reopen: %v", err)
			}
			return s
		},
		Unreachable: func(t *testing.T, o idempotency.Options) idempotency.Store {
			pool, err := pgxpool.New(context.Background(), "postgres://postgres@"+storetestkit.ClosedAddr(t)+"/test?sslmode=disable&connect_timeout=5")
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(pool.Close)
			s, err := pgstore.New(testwait.Context(t, time.Minute), pool, pgstore.Options{Options: o, Table: "t"})
			if err != nil {
				t.Fatal(err)
			}
			return s
		},
	})
}

// TestPostgresBacklog runs the backlog cases, every store on its own
// table.
func TestPostgresBacklog(t *testing.T) {
	storetest.RunBacklog(t, func(t *testing.T, o idempotency.Options) idempotency.Store {
		s, _, _ := newPostgresTestStore(t, o, nil, 4)
		return s
	}, storetest.Capabilities{ServerTime: true})
}

func TestPostgresTableNames(t *testing.T) {
	t.Parallel()
	pool, err := pgxpool.New(context.Background(), "postgres://nobody@127.0.0.1:1/none")
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	cases := []struct {
		table string
		ok    bool
	}{
		{"msgaudit_idempotency", true},
		{"audit.idempotency", true},
		{"_x", true},
		{"MixedCase", true},
		{strings.Repeat("a", 48), true},
		{strings.Repeat("a", 49), false},
		{strings.Repeat("s", 63) + ".t", true},
		{strings.Repeat("s", 64) + ".t", false},
		{"", true}, // the default table
		{"1abc", false},
		{"a-b", false},
		{"a b", false},
		{`a"b`, false},
		{"a;drop table x", false},
		{"a.b.c", false},
		{".a", false},
		{"a.", false},
		{"é", false},
	}
	for _, tc := range cases {
		t.Run("table="+tc.table, func(t *testing.T) {
			_, err := pgstore.New(context.Background(), pool, pgstore.Options{Table: tc.table})
			if (err == nil) != tc.ok {
				t.Errorf("pgstore.New(%q) error = %v, want ok=%v", tc.table, err, tc.ok)
			}
		})
	}
}

func TestPostgresMigrateIdempotent(t *testing.T) {
	t.Parallel()
	ctx := testwait.Context(t, time.Minute)
	pool, table := postgresTestPool(t, nil, 0)
	// Several stores migrating the same table at once: all succeed.
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p, err := pgstore.New(ctx, pool, pgstore.Options{Table: table})
			if err == nil {
				err = p.Migrate(ctx)
			}
			errs <- err
		}()
	}
	testwait.Group(t, &wg, time.Minute, "the end of the 4 concurrent pgstore.New+Migrate calls")
	close(errs)
	for err := range errs {
		if err != nil {
			t.Errorf("concurrent Migrate: %v", err)
		}
	}
	p, err := pgstore.New(ctx, pool, pgstore.Options{Table: table})
	if err != nil {
		t.Fatal(err)
	}
	key := idempotency.Key{Namespace: "n", ID: "1"}
	if _, c, err := p.TryClaim(ctx, key); err != nil {
		t.Fatal(err)
	} else if err := p.Confirm(ctx, c); err != nil {
		t.Fatal(err)
	}
	if err := p.Migrate(ctx); err != nil {
		t.Fatalf("Migrate again: %v", err)
	}
	if ok, err := p.IsConfirmed(ctx, key); err != nil || !ok {
		t.Errorf("IsConfirmed after a second Migrate = %v, %v (data lost?)", ok, err)
	}
	var idx int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM pg_indexes WHERE tablename = $1 AND indexdef LIKE '%(expires_at)%'`, table).Scan(&idx); err != nil {
		t.Fatal(err)
	}
	if idx != 1 {
		t.Errorf("%d expires_at indexes, want 1", idx)
	}
}

func TestPostgresRoundTrips(t *testing.T) {
	t.Parallel()
	ctx := testwait.Context(t, time.Minute)
	var tr pgCounter
	// One connection, so the warm-up prepares every statement on the
	// connection the counted calls use.
	p, _, _ := newPostgresTestStore(t, idempotency.Options{}, &tr, 1)

	type counts struct{ queries, prepares int64 }
	count := func(f func()) counts {
		q, pr := tr.queries.Load(), tr.prepares.Load()
		f()
		return counts{tr.queries.Load() - q, tr.prepares.Load() - pr}
	}
	for _, k := range []string{"warm-1", "warm-2"} {
		key := idempotency.Key{Namespace: "rt", ID: k}
		_, c, err := p.TryClaim(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := p.Renew(ctx, c); err != nil {
			t.Fatal(err)
		}
		if k == "warm-1" {
			err = p.Confirm(ctx, c)
		} else {
			err = p.Release(ctx, c)
		}
		if err != nil {
			t.Fatal(err)
		}
		if _, _, err := pgstore.Claim(ctx, p, key); err != nil {
			t.Fatal(err)
		}
		if _, err := p.IsConfirmed(ctx, key); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 20 {
		key := idempotency.Key{Namespace: "rt", ID: fmt.Sprint("m-", i)}
		var (
			out idempotency.Outcome
			c   idempotency.Claim
			ok  bool
			err error
		)
		steps := []struct {
			name string
			f    func()
		}{
			{"TryClaim(new)", func() { out, c, err = p.TryClaim(ctx, key) }},
			{"TryClaim(in progress)", func() { out, _, err = p.TryClaim(ctx, key) }},
			{"Renew", func() { c, err = p.Renew(ctx, c) }},
			{"Confirm", func() { err = p.Confirm(ctx, c) }},
			{"TryClaim(confirmed)", func() { out, _, err = p.TryClaim(ctx, key) }},
			{"IsConfirmed", func() { ok, err = p.IsConfirmed(ctx, key) }},
			{"Claim(other)", func() { c, ok, err = pgstore.Claim(ctx, p, idempotency.Key{Namespace: "rt2", ID: key.ID}) }},
			{"Release", func() { err = p.Release(ctx, c) }},
		}
		for _, st := range steps {
			if n := count(st.f); n != (counts{1, 0}) {
				t.Errorf("%s: %d queries and %d prepares, want 1 and 0", st.name, n.queries, n.prepares)
			}
			if err != nil {
				t.Fatalf("%s: %v", st.name, err)
			}
		}
		if out != idempotency.AlreadyConfirmed || !ok {
			t.Fatalf("TryClaim after Confirm = %v, Claim(other) ok = %v", out, ok)
		}
	}
}

// TestPostgresPurge: Purge deletes exactly the expired rows, in batches of
// the given size (so floor(expired/batch)+1 DELETE statements), leaves live
// claims and retained confirmations alone, and skips rows locked by another
// transaction instead of waiting for them.
func TestPostgresPurge(t *testing.T) {
	t.Parallel()
	ctx := testwait.Context(t, time.Minute)
	var tr pgCounter
	p, pool, table := newPostgresTestStore(t, idempotency.Options{}, &tr, 0)
	tab := pgx.Identifier{table}.Sanitize()

	const expired, live, confirmed, batch = 23, 5, 4, 7
	if _, err := pool.Exec(ctx, `INSERT INTO `+tab+` (key, state, owner, expires_at)
SELECT 'expired/' || g, CASE WHEN g % 2 = 0 THEN 'claimed' ELSE 'confirmed' END, NULL, now() - g * interval '1 second'
FROM generate_series(1, $1) g`, expired); err != nil {
		t.Fatal(err)
	}
	for i := range live {
		if _, _, err := p.TryClaim(ctx, idempotency.Key{Namespace: "live", ID: fmt.Sprint(i)}); err != nil {
			t.Fatal(err)
		}
	}
	for i := range confirmed {
		_, c, err := p.TryClaim(ctx, idempotency.Key{Namespace: "done", ID: fmt.Sprint(i)})
		if err != nil {
			t.Fatal(err)
		}
		if err := p.Confirm(ctx, c); err != nil {
			t.Fatal(err)
		}
	}

	before := deletesSeen(&tr)
	n, err := p.Purge(ctx, batch)
	if err != nil {
		t.Fatal(err)
	}
	if n != expired {
		t.Errorf("Purge deleted %d rows, want %d", n, expired)
	}
	if got, want := deletesSeen(&tr)-before, expired/batch+1; got != want {
		t.Errorf("Purge ran %d DELETE batches, want %d", got, want)
	}
	var rows int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM `+tab).Scan(&rows); err != nil {
		t.Fatal(err)
	}
	if rows != live+confirmed {
		t.Errorf("%d rows left, want %d", rows, live+confirmed)
	}
	for i := range confirmed {
		if ok, err := p.IsConfirmed(ctx, idempotency.Key{Namespace: "done", ID: fmt.Sprint(i)}); err != nil || !ok {
			t.Errorf("confirmation %d lost by Purge: %v, %v", i, ok, err)
		}
	}

	// A row another transaction holds is skipped, not waited for.
	if _, err := pool.Exec(ctx, `INSERT INTO `+tab+` (key, state, expires_at) VALUES ('locked', 'claimed', now() - interval '1 hour'), ('free', 'claimed', now() - interval '1 hour')`); err != nil {
		t.Fatal(err)
	}
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if _, err := tx.Exec(ctx, `SELECT 1 FROM `+tab+` WHERE key = 'locked' FOR UPDATE`); err != nil {
		t.Fatal(err)
	}
	pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	n, err = p.Purge(pctx, 0)
	if err != nil {
		t.Fatalf("Purge with a locked row: %v (did it wait for the lock?)", err)
	}
	if n != 1 {
		t.Errorf("Purge with a locked row deleted %d, want 1 (the unlocked one)", n)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if n, err := p.Purge(ctx, 0); err != nil || n != 1 {
		t.Errorf("Purge after the lock went = %d, %v; want 1", n, err)
	}
}

// deletesSeen counts the DELETE statements the tracer saw.
func deletesSeen(tr *pgCounter) int {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	n := 0
	for _, s := range tr.sqls {
		if strings.HasPrefix(s, "DELETE") || strings.HasPrefix(s, "WITH d AS (\n  DELETE") {
			n++
		}
	}
	return n
}

// TestPostgresPurgeExpiredByStore: rows the store wrote become purgeable
// once the server's clock passes their lease or retention.
func TestPostgresPurgeExpiredByStore(t *testing.T) {
	t.Parallel()
	ctx := testwait.Context(t, time.Minute)
	// Two stores on one table: lapsing claims, and long claims confirmed
	// with a short retention.
	lapsing, pool, table := newPostgresTestStore(t, idempotency.Options{ClaimTTL: 10 * time.Millisecond}, nil, 0)
	forgetting, err := pgstore.New(ctx, pool, pgstore.Options{Options: idempotency.Options{ClaimTTL: time.Hour, Retention: 10 * time.Millisecond}, Table: table})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 6 {
		key := idempotency.Key{Namespace: "s", ID: fmt.Sprint(i)}
		if i%2 == 0 {
			if _, _, err := lapsing.TryClaim(ctx, key); err != nil {
				t.Fatal(err)
			}
			continue
		}
		_, c, err := forgetting.TryClaim(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		if err := forgetting.Confirm(ctx, c); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(50 * time.Millisecond) // every lease and retention has passed on the server's clock
	n, err := lapsing.Purge(ctx, 4)
	if err != nil || n != 6 {
		t.Errorf("Purge = %d, %v; want 6", n, err)
	}
}

// TestPostgresURL: pgstore.Open takes the table from msgaudit_table, keeps
// the rest of the URL for pgx, migrates, and owns its pool.
func TestPostgresURL(t *testing.T) {
	t.Parallel()
	ctx := testwait.Context(t, time.Minute)
	pool, table := postgresTestPool(t, nil, 0)
	raw := postgresTestURL(t)
	sep := "?"
	if strings.Contains(raw, "?") {
		sep = "&"
	}
	s, err := pgstore.Open(ctx, raw+sep+"msgaudit_table="+table, pgstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	key := idempotency.Key{Namespace: "u", ID: "1"}
	_, c, err := s.TryClaim(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Confirm(ctx, c); err != nil {
		t.Fatal(err)
	}
	var state string
	if err := pool.QueryRow(ctx, `SELECT state FROM `+pgx.Identifier{table}.Sanitize()+` WHERE key = $1`, claimkit.StorageKey(key, 0)).Scan(&state); err != nil {
		t.Fatalf("row not in the URL's table: %v", err)
	}
	if state != "confirmed" {
		t.Errorf("state = %q", state)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := s.IsConfirmed(ctx, key); !errors.Is(err, idempotency.ErrClosed) {
		t.Errorf("IsConfirmed after Close: %v, want ErrClosed", err)
	}
	// The caller's pool is not the store's: still usable.
	if err := pool.Ping(ctx); err != nil {
		t.Error(err)
	}

	// The scheme is case-insensitive, as URL schemes are, also through Open.
	upper := "POSTGRES" + raw[strings.Index(raw, "://"):]
	s2, err := idempotency.Open(ctx, storetestkit.WithQuery(upper, "msgaudit_table="+table), idempotency.Options{})
	if err != nil {
		t.Fatalf("upper-case scheme: %v", err)
	}
	if ok, err := s2.IsConfirmed(ctx, key); err != nil || !ok {
		t.Errorf("IsConfirmed through the upper-case URL = %v, %v", ok, err)
	}
	_ = s2.Close()

	if _, err := pgstore.Open(ctx, raw+sep+"msgaudit_table=bad-name", pgstore.Options{}); err == nil {
		t.Error("pgstore.Open with an invalid table name: nil error")
	}
}

// TestPostgresUnreachable: every operation on a closed port is an error,
// never a verdict, and pgstore.Open fails.
func TestPostgresUnreachable(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	addr := storetestkit.ClosedAddr(t)
	pool, err := pgxpool.New(ctx, "postgres://postgres@"+addr+"/test?sslmode=disable&connect_timeout=5")
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	p, err := pgstore.New(ctx, pool, pgstore.Options{Table: "t"})
	if err != nil {
		t.Fatal(err)
	}
	key := idempotency.Key{Namespace: "n", ID: "1"}
	if out, _, err := p.TryClaim(ctx, key); err == nil {
		t.Errorf("TryClaim = %v, want an error", out)
	}
	if _, ok, err := pgstore.Claim(ctx, p, key); err == nil {
		t.Errorf("Claim = %v, want an error", ok)
	}
	if ok, err := p.IsConfirmed(ctx, key); err == nil {
		t.Errorf("IsConfirmed = %v, want an error", ok)
	}
	c := idempotency.Claim{Key: key, Token: "t"}
	if err := p.Confirm(ctx, c); err == nil || errors.Is(err, idempotency.ErrClaimLost) {
		t.Errorf("Confirm = %v, want a connection error", err)
	}
	if err := p.Release(ctx, c); err == nil || errors.Is(err, idempotency.ErrClaimLost) {
		t.Errorf("Release = %v, want a connection error", err)
	}
	if _, err := p.Renew(ctx, c); err == nil || errors.Is(err, idempotency.ErrClaimLost) {
		t.Errorf("Renew = %v, want a connection error", err)
	}
	if _, err := p.Purge(ctx, 10); err == nil {
		t.Error("Purge: nil error")
	}
	if err := p.Migrate(ctx); err == nil {
		t.Error("Migrate: nil error")
	}
}

// TestPostgresRedaction: errors of a failing open never contain the password
// (userinfo or sslpassword), for an unreachable server, a wrong password and
// an unparsable URL.
func TestPostgresRedaction(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	const pw = "Sup3rSecretPW"
	addr := storetestkit.ClosedAddr(t)
	u, err := url.Parse(postgresTestURL(t))
	if err != nil {
		t.Fatal(err)
	}
	// A role that does not exist, with a password: the server refuses it.
	u.User = url.UserPassword("msgaudit_no_such_role_"+storetestkit.Hex(4), pw)
	wrongUser := u.String()
	cases := []struct{ name, url string }{
		{"closed port", "postgres://postgres:" + pw + "@" + addr + "/test?sslmode=disable"},
		{"sslpassword", "postgres://postgres@" + addr + "/test?sslmode=disable&sslpassword=" + pw},
		{"unparsable", "postgres://postgres:" + pw + "%zz@" + addr + "/test"},
		{"bad option", "postgres://postgres:" + pw + "@" + addr + "/test?sslmode=bogus"},
		{"refused login", wrongUser},
	}
	for _, tc := range cases {
		t.Run("case="+tc.name, func(t *testing.T) {
			_, err := pgstore.Open(ctx, tc.url, pgstore.Options{})
			if err == nil {
				t.Fatal("nil error")
			}
			for _, text := range []string{err.Error(), fmt.Sprintf("%+v", err), fmt.Sprintf("%q", err)} {
				if strings.Contains(text, pw) {
					t.Errorf("error shows the password: %s", text)
				}
			}
		})
	}
}

// TestPostgresCancelled: a cancelled context returns ctx.Err() before any
// query is sent.
func TestPostgresCancelled(t *testing.T) {
	t.Parallel()
	var tr pgCounter
	p, _, _ := newPostgresTestStore(t, idempotency.Options{}, &tr, 0)
	before := tr.queries.Load()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	key := idempotency.Key{Namespace: "n", ID: "1"}
	c := idempotency.Claim{Key: key, Token: "t"}
	errs := map[string]error{}
	_, _, errs["TryClaim"] = p.TryClaim(ctx, key)
	_, _, errs["Claim"] = pgstore.Claim(ctx, p, key)
	_, errs["IsConfirmed"] = p.IsConfirmed(ctx, key)
	errs["Confirm"] = p.Confirm(ctx, c)
	errs["Release"] = p.Release(ctx, c)
	_, errs["Renew"] = p.Renew(ctx, c)
	_, errs["Purge"] = p.Purge(ctx, 10)
	errs["Migrate"] = p.Migrate(ctx)
	for op, err := range errs {
		if !errors.Is(err, context.Canceled) {
			t.Errorf("%s: %v, want context.Canceled", op, err)
		}
	}
	if n := tr.queries.Load() - before; n != 0 {
		t.Errorf("%d queries sent with a cancelled context", n)
	}
}

// TestPostgresTLS: the sslmode and sslrootcert fields of the URL
// reach pgx. Against the test server's own certificate (ssl_cert_file, a
// self-signed one on a stock Debian cluster) verify-ca works; a CA that did
// not sign it fails with a certificate error. Skipped when the server has
// TLS off or its certificate is not readable.
func TestPostgresTLS(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	pool, table := postgresTestPool(t, nil, 2)
	var sslOn, certFile string
	if err := pool.QueryRow(ctx, `SELECT current_setting('ssl'), current_setting('ssl_cert_file')`).Scan(&sslOn, &certFile); err != nil {
		t.Fatal(err)
	}
	if sslOn != "on" {
		t.Skip("the PostgreSQL test server has ssl = off")
	}
	if _, err := os.ReadFile(certFile); err != nil {
		t.Skipf("the server certificate %s is not readable here: %v", certFile, err)
	}
	u, err := url.Parse(postgresTestURL(t))
	if err != nil {
		t.Fatal(err)
	}
	with := func(mode, root string) string {
		v := u.Query()
		v.Set("sslmode", mode)
		v.Set("sslrootcert", root)
		v.Set("msgaudit_table", table)
		c := *u
		c.RawQuery = v.Encode()
		return c.String()
	}
	s, err := pgstore.Open(ctx, with("verify-ca", certFile), pgstore.Options{})
	if err != nil {
		t.Fatalf("verify-ca with the server's certificate as root: %v", err)
	}
	key := idempotency.Key{Namespace: "tls", ID: "1"}
	if out, _, err := s.TryClaim(ctx, key); err != nil || out != idempotency.Claimed {
		t.Errorf("TryClaim over TLS = %v, %v", out, err)
	}
	_ = s.Close()

	other := storetestkit.NewPKI(t)
	_, err = pgstore.Open(ctx, with("verify-ca", other.CAFile), pgstore.Options{})
	if err == nil {
		t.Fatal("verify-ca with a foreign CA succeeded")
	}
	t.Logf("foreign CA: %v", err)
	if !strings.Contains(err.Error(), "certificate") {
		t.Errorf("error %q does not say the certificate was refused", err)
	}
}

// A store on the application's pool: migrate once at start-up, purge
// expired rows now and then. (Compile-only: it needs a PostgreSQL server.)
func ExampleNew() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, "postgres://app@db.internal/app?sslmode=verify-full&sslrootcert=/etc/ssl/db-ca.pem")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer pool.Close()
	store, err := pgstore.New(ctx, pool, pgstore.Options{Table: "msgaudit_idempotency"})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer store.Close() // leaves pool open
	if err := store.Migrate(ctx); err != nil {
		fmt.Println(err)
		return
	}
	// Periodically, e.g. from a ticker: bounded batches, never blocks claimers.
	if n, err := store.Purge(ctx, 1000); err == nil {
		fmt.Println("purged", n)
	}
}

// TestPostgresHungServer: against a server that never answers, a context
// deadline ends every operation with an error that matches
// context.DeadlineExceeded, never a verdict; pgstore.Open likewise.
func TestPostgresHungServer(t *testing.T) {
	t.Parallel()
	addr := storetestkit.SilentServer(t)
	pool, err := pgxpool.New(context.Background(), "postgres://postgres@"+addr+"/test?sslmode=disable")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	p, err := pgstore.New(context.Background(), pool, pgstore.Options{Table: "t"})
	if err != nil {
		t.Fatal(err)
	}
	key := idempotency.Key{Namespace: "n", ID: "1"}
	c := idempotency.Claim{Key: key, Token: "t"}
	ops := map[string]func(ctx context.Context) error{
		"TryClaim":    func(ctx context.Context) error { _, _, err := p.TryClaim(ctx, key); return err },
		"Claim":       func(ctx context.Context) error { _, _, err := pgstore.Claim(ctx, p, key); return err },
		"IsConfirmed": func(ctx context.Context) error { _, err := p.IsConfirmed(ctx, key); return err },
		"Confirm":     func(ctx context.Context) error { return p.Confirm(ctx, c) },
		"Release":     func(ctx context.Context) error { return p.Release(ctx, c) },
		"Renew":       func(ctx context.Context) error { _, err := p.Renew(ctx, c); return err },
		"Purge":       func(ctx context.Context) error { _, err := p.Purge(ctx, 10); return err },
		"Migrate":     func(ctx context.Context) error { return p.Migrate(ctx) },
		"pgstore.Open": func(ctx context.Context) error {
			_, err := pgstore.Open(ctx, "postgres://postgres:pw@"+addr+"/test?sslmode=disable", pgstore.Options{})
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
