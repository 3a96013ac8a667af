package inbox_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/acemq/msgaudit/inbox"
	"github.com/acemq/msgaudit/internal/testkit/pgrestart"
	"github.com/acemq/msgaudit/internal/testkit/testwait"
	"github.com/acemq/msgaudit/receiver"
	"github.com/go-sql-driver/mysql"
)

// TestInboxMariaDBRestart is TestInboxPrimaryRestart on the private
// MariaDB instance: 1,500 keys each delivered twice from 8 goroutines, a
// tenth of the handler runs failing, and the server shut down cleanly
// (fast) or killed with SIGKILL (immediate; InnoDB recovers from its redo
// log) and started again in the middle. Deliveries during the outage fail
// and are requeued; database/sql reconnects by itself. Afterwards every
// key's effect is committed exactly once and at most one of its
// deliveries was acknowledged as new work.
func TestInboxMariaDBRestart(t *testing.T) {
	in := pgrestart.OpenMariaDB(t)
	u, err := url.Parse(in.URL)
	if err != nil {
		t.Fatal(err)
	}
	cfg := mysql.NewConfig()
	cfg.User = u.User.Username()
	cfg.Net, cfg.Addr, cfg.DBName = "tcp", u.Host, strings.TrimPrefix(u.Path, "/")
	cfg.Timeout = 5 * time.Second
	for _, mode := range []string{"fast", "immediate"} {
		t.Run(mode, func(t *testing.T) {
			ctx := testwait.Context(t, 4*time.Minute)
			conn, err := mysql.NewConnector(cfg)
			if err != nil {
				t.Fatal(err)
			}
			db := sql.OpenDB(conn)
			t.Cleanup(func() { _ = db.Close() })
			db.SetMaxOpenConns(16)
			db.SetMaxIdleConns(16)
			suffix := randHex(4)
			fx, table := "restart_fx_"+suffix, "restart_inbox_"+suffix
			if _, err := db.ExecContext(ctx, "CREATE TABLE "+fx+" (`key` VARCHAR(64) PRIMARY KEY, n INTEGER NOT NULL) ENGINE=InnoDB"); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() {
				for _, tb := range []string{fx, table} {
					_, _ = db.ExecContext(context.Background(), "DROP TABLE IF EXISTS "+tb)
				}
			})
			ib, err := inbox.New(ctx, db, inbox.Options{Dialect: inbox.MySQL, Table: table})
			if err != nil {
				t.Fatal(err)
			}
			r, err := receiver.New(receiver.Config{Selectors: []receiver.Selector{ib}, MaxAttempts: 1000})
			if err != nil {
				t.Fatal(err)
			}
			h := inbox.Handler(func(ctx context.Context, tx *sql.Tx, m *receiver.Message) error {
				if _, err := tx.ExecContext(ctx, "INSERT INTO "+fx+" (`key`, n) VALUES (?, 1) ON DUPLICATE KEY UPDATE n = n + 1", m.Key); err != nil {
					return err
				}
				if rand.IntN(10) == 0 {
					return errPoolerHandler
				}
				return nil
			})
			keys := poolerKeys("m", 1500)
			var (
				start                    = time.Now()
				acked                    atomic.Int64
				restartAt, upAt, firstOK atomic.Int64
				restartDur               time.Duration
				restartErr               error
				restarted                = make(chan struct{})
				errorsDuring             atomic.Int64
				since                    = func() int64 { return int64(time.Since(start)) }
				total                    = int64(2 * len(keys))
			)
			go func() {
				defer close(restarted)
				for acked.Load() < total/4 && ctx.Err() == nil {
					time.Sleep(5 * time.Millisecond)
				}
				restartAt.Store(since())
				restartDur, restartErr = in.Restart(ctx, mode)
				upAt.Store(since())
			}()
			run := poolerDeliver(t, ctx, keys, 2, 8, func(ctx context.Context, m *receiver.Message) receiver.Result {
				return r.Process(ctx, m, h)
			}, func(res receiver.Result) {
				if res.Action == receiver.Ack {
					acked.Add(1)
					if upAt.Load() != 0 {
						firstOK.CompareAndSwap(0, since())
					}
				}
				if res.Err != nil && !errors.Is(res.Err, errPoolerHandler) {
					errorsDuring.Add(1)
				}
			})
			<-restarted
			if restartErr != nil {
				t.Fatal(restartErr)
			}
			poolerCheckOnceCol(t, db, fx, "`key`", keys, run)
			if errorsDuring.Load() == 0 {
				t.Error("no delivery failed on the database: the restart did not happen during the run")
			}
			recovered := "no delivery succeeded after the restart"
			if f := firstOK.Load(); f != 0 {
				recovered = fmt.Sprintf("first acknowledgement %.1f ms after the restart began", float64(f-restartAt.Load())/1e6)
			}
			t.Logf("restart %s: ctl took %.0f ms; %d deliveries, %d acks (%d duplicates), %d requeues, %d failed on the database; %s",
				mode, float64(restartDur)/1e6, run.deliveries.Load(), run.acks.Load(), run.duplicates.Load(), run.requeues.Load(), errorsDuring.Load(), recovered)
		})
	}
}
