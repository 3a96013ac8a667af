package inbox_test

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/acemq/msgaudit/inbox"
	"github.com/acemq/msgaudit/internal/testkit/testwait"
	"github.com/acemq/msgaudit/receiver"
)

// BenchmarkPurgeAtVolume measures what the automatic purge costs the
// deliveries at volume: it fills the inbox table with expired rows (5
// million on PostgreSQL and MySQL, 1 million on SQLite, in INSERT ... SELECT),
// runs 8 goroutines delivering new keys through the inbox at full speed
// (a transaction per key: MaxBatch 1) for a fixed time without a purge,
// then again while the automatic purge deletes every expired row, then
// once more without it, and reports the throughputs, the drop (against
// the mean of the two phases without a purge), the longest delivery of
// each phase and how long the purge took. It ignores b.N. The fill takes minutes, so
// it runs only with MSGAUDIT_PURGE_VOLUME=1:
//
//	MSGAUDIT_PURGE_VOLUME=1 go test -run '^$' -bench PurgeAtVolume -benchtime 1x -timeout 60m -v ./inbox
//
// MSGAUDIT_PURGE_VOLUME_ROWS and MSGAUDIT_PURGE_VOLUME_SECONDS (the
// baseline's length, 30 by default) change the sizes.
func BenchmarkPurgeAtVolume(b *testing.B) {
	if os.Getenv("MSGAUDIT_PURGE_VOLUME") != "1" {
		b.Skip("set MSGAUDIT_PURGE_VOLUME=1 to fill a table with millions of rows and measure the purge")
	}
	b.Run("postgres", func(b *testing.B) {
		purgeAtVolume(b, newPostgres(b, false), envInt(b, "MSGAUDIT_PURGE_VOLUME_ROWS", 5_000_000))
	})
	b.Run("sqlite", func(b *testing.B) { purgeAtVolume(b, newSQLite(b), envInt(b, "MSGAUDIT_PURGE_VOLUME_ROWS", 1_000_000)) })
	b.Run("mysql", func(b *testing.B) {
		be := newMySQL(b)
		// Straight to the server: the fault proxy the other tests use would
		// measure itself.
		conn, err := mysql.NewConnector(mysqlConfig(b))
		if err != nil {
			b.Fatal(err)
		}
		be.db = sql.OpenDB(conn)
		b.Cleanup(func() { _ = be.db.Close() })
		purgeAtVolume(b, be, envInt(b, "MSGAUDIT_PURGE_VOLUME_ROWS", 5_000_000))
	})
}

func envInt(b *testing.B, name string, def int) int {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n <= 0 {
		b.Fatalf("%s=%q: want a positive integer", name, v)
	}
	return n
}

// phase is one measured stretch of deliveries.
type phase struct {
	deliveries int
	took       time.Duration
	lat        []time.Duration // sorted
}

func (p phase) rate() float64 { return float64(p.deliveries) / p.took.Seconds() }

func (p phase) pct(q float64) time.Duration {
	if len(p.lat) == 0 {
		return 0
	}
	return p.lat[min(len(p.lat)-1, int(q*float64(len(p.lat))))]
}

func (p phase) String() string {
	return fmt.Sprintf("%d deliveries in %v: %.0f/s; latency p50 %v, p99 %v, max %v", p.deliveries, p.took.Round(time.Millisecond),
		p.rate(), p.pct(0.5).Round(time.Microsecond), p.pct(0.99).Round(time.Microsecond), p.pct(1).Round(time.Microsecond))
}

func purgeAtVolume(b *testing.B, be *backend, rows int) {
	const goroutines = 8
	secs := envInt(b, "MSGAUDIT_PURGE_VOLUME_SECONDS", 30)
	lanes := 0
	if be.dialect != inbox.SQLite {
		lanes = goroutines
		be.db.SetMaxOpenConns(2 * goroutines)
		be.db.SetMaxIdleConns(2 * goroutines)
	}
	ib := be.newInbox(b, inbox.Options{Retention: 24 * time.Hour, MaxBatch: 1, Lanes: lanes})
	defer ib.Close()

	t0 := time.Now()
	fillExpired(b, be, rows, time.Now().Add(-30*24*time.Hour))
	analyze := `ANALYZE `
	if be.dialect == inbox.MySQL {
		analyze = `ANALYZE TABLE `
	}
	if _, err := be.db.ExecContext(context.Background(), analyze+be.table); err != nil {
		b.Fatal(err)
	}
	b.Logf("%s: filled %d expired rows in %v", be.name, rows, time.Since(t0).Round(time.Millisecond))

	h := inbox.Handler(func(ctx context.Context, tx *sql.Tx, m *receiver.Message) error { return nil })
	r := newReceiver(b, ib, nil)
	var seq atomic.Int64
	// deliver runs the goroutines until done returns true.
	deliver := func(done func() bool) phase {
		var (
			wg    sync.WaitGroup
			mu    sync.Mutex
			all   []time.Duration
			stop  atomic.Bool
			fails atomic.Int64
		)
		start := time.Now()
		for range goroutines {
			wg.Add(1)
			go func() {
				defer wg.Done()
				var lat []time.Duration
				for !stop.Load() {
					k := fmt.Sprintf("live-%d", seq.Add(1))
					t0 := time.Now()
					res := process(b, r, msg(k), h)
					lat = append(lat, time.Since(t0))
					if res.Action != receiver.Ack || res.Duplicate {
						fails.Add(1)
					}
				}
				mu.Lock()
				all = append(all, lat...)
				mu.Unlock()
			}()
		}
		for !done() {
			time.Sleep(10 * time.Millisecond)
		}
		stop.Store(true)
		took := time.Since(start)
		testwait.Group(b, &wg, testwait.Long, "the delivering goroutines")
		if n := fails.Load(); n > 0 {
			b.Fatalf("%d deliveries were not new work acknowledged", n)
		}
		slices.Sort(all)
		return phase{deliveries: len(all), took: took, lat: all}
	}

	until := time.Now().Add(time.Duration(secs) * time.Second)
	base := deliver(func() bool { return time.Now().After(until) })
	b.Logf("%s: without purge: %v", be.name, base)

	purger := be.newInbox(b, inbox.Options{Retention: 24 * time.Hour, PurgeInterval: time.Millisecond})
	defer purger.Close()
	during := deliver(func() bool { return purger.PurgeStats().Rows >= uint64(rows) })
	st := purger.PurgeStats()
	if st.Rows != uint64(rows) || st.Errors != 0 {
		b.Fatalf("PurgeStats = %+v; want %d rows, no error", st, rows)
	}
	b.Logf("%s: during the purge: %v", be.name, during)
	purger.Close()
	// A second baseline after the purge shows how much the machine's own
	// noise moves the figure; the drop is against the mean of the two.
	until = time.Now().Add(time.Duration(secs) * time.Second)
	after := deliver(func() bool { return time.Now().After(until) })
	b.Logf("%s: without purge, after it: %v", be.name, after)
	drop := 100 * (1 - 2*during.rate()/(base.rate()+after.rate()))
	b.Logf("%s: purge of %d rows took %v (%.0f rows/s); throughput drop %.1f%%; longest delivery during the purge %v",
		be.name, rows, during.took.Round(time.Millisecond), float64(rows)/during.took.Seconds(), drop, during.pct(1).Round(time.Microsecond))
	b.ReportMetric(base.rate(), "deliveries/s-base")
	b.ReportMetric(during.rate(), "deliveries/s-purging")
	b.ReportMetric(drop, "drop-%")
	b.ReportMetric(float64(during.pct(1).Milliseconds()), "max-ms-purging")
	b.ReportMetric(during.took.Seconds(), "purge-s")
}
