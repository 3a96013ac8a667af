package pgstore

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/acemq/msgaudit/idempotency"
	"github.com/acemq/msgaudit/internal/testkit/storetestkit"
	"github.com/acemq/msgaudit/internal/testkit/testenv"
)

// TestBacklogPlan fills a table with 100,000 confirmations spread over
// the retention and 10 held claims, analyzes it, and runs Backlog's
// statement under EXPLAIN ANALYZE: no node may read the table whole, and
// together they may read no more than the head of the expires_at index
// and the rows expiring within one claim TTL.
func TestBacklogPlan(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	pool, err := pgxpool.New(ctx, testenv.Getenv(t, "MSGAUDIT_POSTGRES_URL", "the PostgreSQL store tests need a server"))
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
	p, err := newStore(ctx, pool, Options{Options: idempotency.Options{ClaimTTL: time.Minute, Retention: 24 * time.Hour}, Table: table})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	const n = 100000
	if _, err := pool.Exec(ctx, `INSERT INTO `+p.table+` (key, state, owner, expires_at, updated_at)
SELECT 'c' || g, 'confirmed', NULL, now() + g * interval '864 ms', now() + g * interval '864 ms' - interval '1 day'
FROM generate_series(1, $1::int) g`, n); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `INSERT INTO `+p.table+` (key, state, owner, expires_at, updated_at)
SELECT 'h' || g, 'claimed', 'o', now() + interval '1 minute' - g * interval '1 second', now() - g * interval '1 second'
FROM generate_series(1, 10) g`); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `ANALYZE `+p.table); err != nil {
		t.Fatal(err)
	}
	b, err := p.Backlog(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if b.Held != 10 || b.Rows < n/2 || b.OldestHeld < 10*time.Second || b.OldestRow < 23*time.Hour {
		t.Errorf("Backlog = %+v; want 10 held, the oldest 10 s, about %d rows, the oldest a day old", b, n)
	}
	var plan []byte
	if err := pool.QueryRow(ctx, `EXPLAIN (ANALYZE, FORMAT JSON) `+p.sqlBacklog, p.batchMode, p.table, p.claimUS, backlogHeldCap, backlogFirstRows).Scan(&plan); err != nil {
		t.Fatalf("explain: %v", err)
	}
	var doc []map[string]any
	if err := json.Unmarshal(plan, &doc); err != nil {
		t.Fatal(err)
	}
	read := 0.0
	var walk func(n map[string]any)
	walk = func(n map[string]any) {
		if rel, _ := n["Relation Name"].(string); rel == table {
			loops, _ := n["Actual Loops"].(float64)
			rows, _ := n["Actual Rows"].(float64)
			removed, _ := n["Rows Removed by Filter"].(float64)
			if loops > 0 && n["Node Type"] != "Index Scan" && n["Node Type"] != "Bitmap Heap Scan" {
				t.Errorf("%v on the table in the plan:\n%s", n["Node Type"], plan)
			}
			read += loops * (rows + removed)
		}
		for _, c := range asNodes(n["Plans"]) {
			walk(c)
		}
	}
	walk(doc[0]["Plan"].(map[string]any))
	// The head of the index, the claims, and the confirmations expiring
	// within the claim TTL (about 70 of them).
	if limit := float64(backlogFirstRows + 10 + 200); read > limit {
		t.Errorf("the statement read %v rows, want at most %v:\n%s", read, limit, plan)
	}
	t.Logf("rows read: %v", read)
}
