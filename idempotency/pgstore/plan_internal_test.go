package pgstore

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/acemq/msgaudit/idempotency"
	"github.com/acemq/msgaudit/internal/testkit/storetestkit"
	"github.com/acemq/msgaudit/internal/testkit/testenv"
)

// TestBatchExecMode: the batch statements go out as unnamed statements,
// planned at every call, whatever the pool's default; only a pool that
// prepares and caches statements (pgx's default) is overridden.
func TestBatchExecMode(t *testing.T) {
	cases := []struct {
		def           pgx.QueryExecMode
		describeCache int
		want          pgx.QueryExecMode
	}{
		{pgx.QueryExecModeCacheStatement, 512, pgx.QueryExecModeCacheDescribe},
		{pgx.QueryExecModeCacheStatement, 0, pgx.QueryExecModeExec},
		{pgx.QueryExecModeCacheDescribe, 512, pgx.QueryExecModeCacheDescribe},
		{pgx.QueryExecModeDescribeExec, 512, pgx.QueryExecModeDescribeExec},
		{pgx.QueryExecModeExec, 0, pgx.QueryExecModeExec},
		{pgx.QueryExecModeSimpleProtocol, 512, pgx.QueryExecModeSimpleProtocol},
	}
	for _, tc := range cases {
		if got := batchExecMode(tc.def, tc.describeCache); got != tc.want {
			t.Errorf("batchExecMode(%v, %d) = %v, want %v", tc.def, tc.describeCache, got, tc.want)
		}
	}
}

// TestBatchPlansProbeTheKey fills a table that was never analyzed (as every
// table is in its first minute) with 20,000 live rows and asks PostgreSQL
// how it would run each batch statement over 64 of them, the way the store
// sends it: every plan must reach the rows through the primary key. A plan
// that scans the table, or walks the expires_at index over every live row,
// costs time in proportion to the table at every batch. The store must not
// have prepared any batch statement on the connection either: a prepared
// statement settles on a generic plan made while the table was small.
func TestBatchPlansProbeTheKey(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	url := testenv.Getenv(t, "MSGAUDIT_POSTGRES_URL", "the PostgreSQL store tests need a server")
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		t.Fatalf("MSGAUDIT_POSTGRES_URL: %v", err)
	}
	cfg.MaxConns = 1 // one connection: the prepared-statement check sees the batches' connection
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatalf("pgxpool: %v", err)
	}
	defer pool.Close()
	table := "msgaudit_test_" + storetestkit.Hex(8)
	defer func() {
		if _, err := pool.Exec(context.Background(), `DROP TABLE IF EXISTS `+pgx.Identifier{table}.Sanitize()); err != nil {
			t.Errorf("cleanup: drop %s: %v", table, err)
		}
	}()
	p, err := New(ctx, pool, Options{Options: idempotency.Options{ClaimTTL: time.Hour, Retention: time.Hour}, Table: table})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	// Run each batch statement more than five times while the table is
	// small: that is when a prepared statement would switch to a generic
	// plan.
	for i := range 8 {
		keys := make([]idempotency.Key, 4)
		for j := range keys {
			keys[j] = idempotency.Key{Namespace: "plan", ID: fmt.Sprintf("warm-%d-%d", i, j)}
		}
		res := make([]idempotency.ClaimResult, len(keys))
		if err := p.TryClaimBatch(ctx, keys, res); err != nil {
			t.Fatal(err)
		}
		claims := []idempotency.Claim{res[0].Claim, res[1].Claim}
		if err := p.ConfirmBatch(ctx, claims, make([]error, 2)); err != nil {
			t.Fatal(err)
		}
		claims = []idempotency.Claim{res[2].Claim, res[3].Claim}
		if err := p.ReleaseBatch(ctx, claims, make([]error, 2)); err != nil {
			t.Fatal(err)
		}
	}
	var prepared int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM pg_prepared_statements WHERE statement IN ($1, $2, $3)`,
		p.sqlTryClaimBatch, p.sqlConfirmBatch, p.sqlReleaseBatch).Scan(&prepared); err != nil {
		t.Fatal(err)
	}
	if prepared != 0 {
		t.Errorf("%d batch statements prepared on the connection; want 0 (planned at every call)", prepared)
	}

	// Live rows, half claimed and half confirmed. At 20,000 rows and 64
	// keys a scan of the table may cost the planner less than 64 probes
	// (it may choose either), but never a walk of the expires_at index,
	// which PostgreSQL guesses returns a third of the table while here
	// every row is live. At 100,000 rows only the primary key is right.
	fill := func(from, to int) {
		t.Helper()
		if _, err := pool.Exec(ctx, `INSERT INTO `+p.table+` (key, state, owner, expires_at)
SELECT 'fill-' || g, CASE WHEN g % 2 = 0 THEN 'claimed' ELSE 'confirmed' END,
       CASE WHEN g % 2 = 0 THEN 'o' || g END, now() + interval '1 hour'
FROM generate_series($1::int, $2::int) g`, from, to); err != nil {
			t.Fatal(err)
		}
	}
	var keys, owners []string
	for g := 2; len(keys) < 64; g += 2 {
		keys, owners = append(keys, fmt.Sprintf("fill-%d", g)), append(owners, fmt.Sprintf("o%d", g))
	}
	pkey := table + "_pkey"
	fill(1, 20000)
	checkPlans(ctx, t, p, pool, keys, owners, func(scan string) bool {
		return !strings.Contains(scan, postgresIndexSuffix)
	})
	fill(20001, 100000)
	checkPlans(ctx, t, p, pool, keys, owners, func(scan string) bool {
		return strings.HasPrefix(scan, "ModifyTable") || strings.HasSuffix(scan, " on "+pkey) || scan == "Bitmap Heap Scan on <nil>"
	})
}

// checkPlans asks PostgreSQL how it would run each of p's batch statements
// over keys, sent as the store sends them, and reports every access to the
// store's table that ok refuses ("Node Type on Index Name"), and a plan
// that never touches the table.
func checkPlans(ctx context.Context, t *testing.T, p *Store, pool *pgxpool.Pool, keys, owners []string, ok func(scan string) bool) {
	t.Helper()
	table := strings.Trim(p.table, `"`)
	for _, st := range []struct {
		name, sql string
		args      []any
	}{
		{"try-claim", p.sqlTryClaimBatch, []any{keys, owners, p.claimUS}},
		{"confirm", p.sqlConfirmBatch, []any{keys, owners, p.retainUS}},
		{"release", p.sqlReleaseBatch, []any{keys, owners}},
	} {
		var plan []byte
		args := append([]any{p.batchMode}, st.args...)
		if err := pool.QueryRow(ctx, `EXPLAIN (FORMAT JSON) `+st.sql, args...).Scan(&plan); err != nil {
			t.Fatalf("%s: explain: %v", st.name, err)
		}
		var doc []map[string]any
		if err := json.Unmarshal(plan, &doc); err != nil {
			t.Fatalf("%s: %v", st.name, err)
		}
		var scans []string
		var walk func(n map[string]any)
		walk = func(n map[string]any) {
			rel, _ := n["Relation Name"].(string)
			idx, _ := n["Index Name"].(string)
			if rel == table || strings.HasPrefix(idx, table) {
				scans = append(scans, fmt.Sprintf("%v on %v", n["Node Type"], n["Index Name"]))
			}
			for _, c := range asNodes(n["Plans"]) {
				walk(c)
			}
		}
		walk(doc[0]["Plan"].(map[string]any))
		if len(scans) == 0 {
			t.Errorf("%s: no access to %s in the plan:\n%s", st.name, table, plan)
		}
		for _, s := range scans {
			if !ok(s) {
				t.Errorf("%s at %d keys: %s in the plan %q:\n%s", st.name, len(keys), s, scans, plan)
			}
		}
	}
}

// asNodes returns an EXPLAIN JSON "Plans" list as nodes.
func asNodes(v any) []map[string]any {
	l, _ := v.([]any)
	out := make([]map[string]any, 0, len(l))
	for _, x := range l {
		if m, ok := x.(map[string]any); ok {
			out = append(out, m)
		}
	}
	return out
}
