package mysqlstore_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/acemq/msgaudit/idempotency"
	"github.com/acemq/msgaudit/idempotency/mysqlstore"
	"github.com/acemq/msgaudit/internal/testkit/testwait"
)

// TestBacklogPlan fills a table with 100,000 confirmations spread over
// the retention and 10 held claims and runs Backlog's statement under
// MariaDB's ANALYZE: no access may read the table whole, and together
// they may read no more than the head of the expires_at index and the
// rows expiring within one claim TTL.
func TestBacklogPlan(t *testing.T) {
	ctx := testwait.Context(t, 2*time.Minute)
	s, table := newStore(t, idempotency.Options{ClaimTTL: time.Minute, Retention: 24 * time.Hour})
	db := openDB(t)
	var version string
	if err := db.QueryRowContext(ctx, `SELECT VERSION()`).Scan(&version); err != nil {
		t.Fatal(err)
	}
	const n = 100000
	// 864 ms apart: a day's worth. Rows are inserted in chunks from a
	// recursive CTE, which MySQL and MariaDB both have.
	nowUS := time.Now().UnixMicro()
	for from := 0; from < n; from += 1000 {
		if _, err := db.ExecContext(ctx, `INSERT INTO `+table+" (`key`, state, owner, expires_at) "+`
WITH RECURSIVE g(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM g WHERE i < 1000)
SELECT CONCAT('c', ? + i), 'confirmed', NULL, ? + (? + i) * 864000 FROM g`, from, nowUS, from); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := db.ExecContext(ctx, `INSERT INTO `+table+" (`key`, state, owner, expires_at) "+`
WITH RECURSIVE g(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM g WHERE i < 10)
SELECT CONCAT('h', i), 'claimed', 'o', ? + 60000000 - i * 1000000 FROM g`, nowUS); err != nil {
		t.Fatal(err)
	}
	if _, err := db.ExecContext(ctx, `ANALYZE TABLE `+table); err != nil {
		t.Fatal(err)
	}
	b, err := s.Backlog(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if b.Held != 10 || b.Rows < n/2 || b.OldestHeld < 9*time.Second || b.OldestRow < 23*time.Hour {
		t.Errorf("Backlog = %+v; want 10 held, the oldest about 10 s, about %d rows, the oldest a day old", b, n)
	}
	q, args := mysqlstore.BacklogSQL(s)
	var plan string
	if err := db.QueryRowContext(ctx, `ANALYZE FORMAT=JSON `+q, args...).Scan(&plan); err != nil {
		t.Fatalf("ANALYZE on %s: %v", version, err)
	}
	var doc any
	if err := json.Unmarshal([]byte(plan), &doc); err != nil {
		t.Fatal(err)
	}
	read := 0.0
	var walk func(v any)
	walk = func(v any) {
		switch v := v.(type) {
		case map[string]any:
			if v["table_name"] == table {
				rows, _ := v["r_rows"].(float64)
				loops, _ := v["r_loops"].(float64)
				if v["access_type"] == "ALL" {
					t.Errorf("a full scan of the table in the plan:\n%s", plan)
				}
				read += rows * loops
			}
			for _, c := range v {
				walk(c)
			}
		case []any:
			for _, c := range v {
				walk(c)
			}
		}
	}
	walk(doc)
	t.Logf("rows read: %v", read)
	if limit := float64(1000 + 10 + 200); read == 0 || read > limit {
		t.Errorf("the statement read %v rows, want some and at most %v:\n%s", read, limit, plan)
	}
}
