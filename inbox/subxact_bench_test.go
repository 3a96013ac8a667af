package inbox_test

import (
	"context"
	"database/sql"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/acemq/msgaudit/internal/inboxsql"
)

// BenchmarkSubtransactionCache measures what a batch's savepoints cost
// the other sessions of a PostgreSQL server. Each op is one batch written
// the way a lane writes it: BEGIN, the lane's SAVEPOINT, then per member
// a SAVEPOINT, the inbox row, an effect row and RELEASE, then RELEASE of
// the lane's savepoint and COMMIT; the batch is held open for 20 ms, as a
// batch waits for its slowest handler. Meanwhile another session commits
// small transactions (as other lanes do) and readers count the effect
// table's rows. A writing savepoint is a subtransaction with an id of its
// own, and so is the lane's savepoint around them; a backend caches 64
// such ids, and past that every snapshot taken meanwhile is marked
// overflowed, so readers look each of the open batch's rows up in
// pg_subtrans. The figures: reads/s of the readers, and subtrans/op, the
// server's Subtrans SLRU block hits and reads per batch (pg_stat_slru;
// the writer adds about one per member, readers of an overflowed
// snapshot one per row they check; other sessions on the server add
// theirs).
//
// members=63 is the largest batch that stays in the cache (63 members
// and the lane's savepoint); Options.MaxBatch is capped there.
func BenchmarkSubtransactionCache(b *testing.B) {
	for _, members := range []int{32, 63, 64, 128, 256} {
		b.Run(fmt.Sprintf("members=%d", members), func(b *testing.B) {
			be := newPostgres(b, false)
			ctx := context.Background()
			if _, err := be.db.ExecContext(ctx, `CREATE TABLE `+be.table+` (key TEXT PRIMARY KEY)`); err != nil {
				b.Fatal(err)
			}
			// Rows for the readers to count, committed before the clock.
			if _, err := be.db.ExecContext(ctx, `INSERT INTO `+be.fx+` (key, n, parent) SELECT 'pre-' || g, 1, 'ok' FROM generate_series(1, 20000) g`); err != nil {
				b.Fatal(err)
			}
			if _, err := be.db.ExecContext(ctx, `VACUUM ANALYZE `+be.fx); err != nil {
				b.Fatal(err)
			}
			stop := make(chan struct{})
			var reads atomic.Int64
			var wg sync.WaitGroup
			// Another lane commits meanwhile, so the open batch's ids fall
			// below the readers' snapshot horizon and must be looked up.
			if _, err := be.db.ExecContext(ctx, `CREATE TABLE `+be.parent+`_other (n BIGSERIAL PRIMARY KEY)`); err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { _, _ = be.db.ExecContext(context.Background(), `DROP TABLE IF EXISTS `+be.parent+`_other`) })
			wg.Go(func() {
				for {
					select {
					case <-stop:
						return
					case <-time.After(2 * time.Millisecond):
					}
					if _, err := be.db.ExecContext(ctx, `INSERT INTO `+be.parent+`_other DEFAULT VALUES`); err != nil {
						b.Error(err)
						return
					}
				}
			})
			const readers = 4
			for range readers {
				wg.Go(func() {
					for {
						select {
						case <-stop:
							return
						default:
						}
						var n int
						if err := be.db.QueryRowContext(ctx, `SELECT count(*) FROM `+be.fx).Scan(&n); err != nil {
							b.Error(err)
							return
						}
						reads.Add(1)
					}
				})
			}
			time.Sleep(1500 * time.Millisecond)
			slru0 := subtransSLRU(b, be.db)
			seq := 0
			t0 := time.Now()
			for b.Loop() {
				writeBatch(b, be, members, &seq)
			}
			elapsed := time.Since(t0)
			close(stop)
			wg.Wait()
			// Backends flush their statistics at most once a second.
			time.Sleep(1500 * time.Millisecond)
			slru1 := subtransSLRU(b, be.db)
			b.ReportMetric(float64(reads.Load())/elapsed.Seconds(), "reads/s")
			b.ReportMetric(float64(slru1-slru0)/float64(b.N), "subtrans/op")
		})
	}
}

// writeBatch writes one batch of n members as a lane does and holds it
// open for 20 ms before its COMMIT.
func writeBatch(b *testing.B, be *backend, n int, seq *int) {
	ctx := context.Background()
	tx, err := be.db.BeginTx(ctx, nil)
	if err != nil {
		b.Fatal(err)
	}
	defer tx.Rollback()
	exec := func(q string, args ...any) {
		if _, err := tx.ExecContext(ctx, q, args...); err != nil {
			b.Fatalf("%s: %v", q, err)
		}
	}
	exec(`SAVEPOINT ` + inboxsql.BatchSavepoint)
	for range n {
		*seq++
		key := fmt.Sprintf("k-%d", *seq)
		exec(`SAVEPOINT ` + inboxsql.Savepoint)
		exec(`INSERT INTO `+be.table+` (key) VALUES ($1)`, key)
		exec(`INSERT INTO `+be.fx+` (key, n, parent) VALUES ($1, 1, 'ok')`, key)
		exec(`RELEASE SAVEPOINT ` + inboxsql.Savepoint)
	}
	time.Sleep(20 * time.Millisecond)
	exec(`RELEASE SAVEPOINT ` + inboxsql.BatchSavepoint)
	if err := tx.Commit(); err != nil {
		b.Fatal(err)
	}
}

// subtransSLRU returns the server's Subtrans SLRU block hits plus reads.
func subtransSLRU(b *testing.B, db *sql.DB) int64 {
	var n int64
	if err := db.QueryRowContext(context.Background(), `SELECT blks_hit + blks_read FROM pg_stat_slru WHERE name = 'Subtrans'`).Scan(&n); err != nil {
		b.Fatal(err)
	}
	return n
}
