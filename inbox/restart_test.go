package inbox_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync/atomic"
	"testing"
	"time"

	"github.com/acemq/msgaudit/inbox"
	"github.com/acemq/msgaudit/internal/testkit/pgrestart"
	"github.com/acemq/msgaudit/internal/testkit/testwait"
	"github.com/acemq/msgaudit/receiver"
)

// TestInboxPrimaryRestart: deliveries through receiver.Process from 8
// goroutines into the inbox (database/sql on pgx, pgx's default query
// mode) on the private PostgreSQL instance, 1,500 keys each delivered
// twice, a tenth of the handler runs failing; the server is restarted in
// the middle (pg_ctl restart -m fast, and in a second run -m immediate).
// Deliveries during the outage fail and are requeued; the pool reconnects
// by itself. Afterwards every key's effect is committed exactly once and
// at most one of its deliveries was acknowledged as new work, so no
// acknowledgement covered a commit that did not happen (none, when the
// COMMIT went through but its answer was lost: that delivery was requeued
// and its redelivery acknowledged as a duplicate). It logs the errors,
// such lost answers and the time until the first delivery succeeded again.
func TestInboxPrimaryRestart(t *testing.T) {
	in := pgrestart.Open(t)
	for _, mode := range []string{"fast", "immediate"} {
		t.Run(mode, func(t *testing.T) {
			ctx := testwait.Context(t, 4*time.Minute)
			db, fx, table := poolerDB(t, in.URL, 0, 16)
			ib, err := inbox.New(ctx, db, inbox.Options{Dialect: inbox.PostgreSQL, Table: table})
			if err != nil {
				t.Fatal(err)
			}
			r, err := receiver.New(receiver.Config{Selectors: []receiver.Selector{ib}, MaxAttempts: 1000})
			if err != nil {
				t.Fatal(err)
			}
			h := inbox.Handler(func(ctx context.Context, tx *sql.Tx, m *receiver.Message) error {
				if _, err := tx.ExecContext(ctx, `INSERT INTO `+fx+` (key, n) VALUES ($1, 1) ON CONFLICT (key) DO UPDATE SET n = `+fx+`.n + 1`, m.Key); err != nil {
					return err
				}
				if rand.IntN(10) == 0 {
					return errPoolerHandler
				}
				return nil
			})
			keys := poolerKeys("r", 1500)
			var (
				start                      = time.Now()
				acked                      atomic.Int64
				restartAt, upAt, firstOK   atomic.Int64
				restartDur                 time.Duration
				restartErr                 error
				restarted                  = make(chan struct{})
				errorsDuring, errorsLogged atomic.Int64
				since                      = func() int64 { return int64(time.Since(start)) }
				total                      = int64(2 * len(keys))
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
					if errorsLogged.Add(1) <= 3 {
						t.Logf("during the restart: %s: %v", res.Reason, res.Err)
					}
				}
			})
			<-restarted
			if restartErr != nil {
				t.Fatal(restartErr)
			}
			poolerCheckOnce(t, db, fx, keys, run)
			ms := func(ns int64) float64 { return float64(ns) / 1e6 }
			recovered := "no delivery succeeded after the restart"
			if f := firstOK.Load(); f != 0 {
				recovered = fmt.Sprintf("first acknowledgement %.1f ms after the restart began, %.1f ms after pg_ctl returned", ms(f-restartAt.Load()), ms(f-upAt.Load()))
			}
			lost := 0
			for _, k := range keys {
				if run.newAcks[k] == 0 {
					lost++
				}
			}
			t.Logf("restart -m %s: pg_ctl took %.0f ms; %d deliveries, %d acks (%d duplicates), %d requeues, %d failed on the database, %d commits whose answer was lost; %s",
				mode, float64(restartDur)/1e6, run.deliveries.Load(), run.acks.Load(), run.duplicates.Load(), run.requeues.Load(), errorsDuring.Load(), lost, recovered)
		})
	}
}
