package pgxinbox_test

import (
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/acemq/msgaudit/internal/testkit/pgrestart"
	"github.com/acemq/msgaudit/internal/testkit/testwait"
	"github.com/acemq/msgaudit/receiver"
)

// TestPgxInboxPrimaryRestart: deliveries through receiver.Process from 8
// goroutines into the pgx-native inbox (pgx's default query mode) on the
// private PostgreSQL instance, 1,500 keys each delivered twice, a tenth
// of the handler runs failing; the server is restarted in the middle
// (pg_ctl restart -m fast, and in a second run -m immediate). Deliveries
// during the outage fail and are requeued; the pool reconnects by
// itself. Afterwards every key's effect is committed exactly once and at
// most one of its deliveries was acknowledged as new work, so no
// acknowledgement covered a commit that did not happen. It logs the
// errors, the commits whose answer was lost and the time until the first
// delivery succeeded again.
func TestPgxInboxPrimaryRestart(t *testing.T) {
	in := pgrestart.Open(t)
	for _, mode := range []string{"fast", "immediate"} {
		t.Run(mode, func(t *testing.T) {
			ctx := testwait.Context(t, 4*time.Minute)
			o := newOnceRun(t, in.URL, 0)
			const nkeys = 1500
			var (
				start                    = time.Now()
				acked, logged            atomic.Int64
				restartAt, upAt, firstOK atomic.Int64
				restartDur               time.Duration
				restartErr               error
				restarted                = make(chan struct{})
				since                    = func() int64 { return int64(time.Since(start)) }
			)
			go func() {
				defer close(restarted)
				for acked.Load() < nkeys/2 && ctx.Err() == nil {
					time.Sleep(5 * time.Millisecond)
				}
				restartAt.Store(since())
				restartDur, restartErr = in.Restart(ctx, mode)
				upAt.Store(since())
			}()
			o.deliver(t, ctx, nkeys, 2, 8, func(res receiver.Result) {
				if res.Action == receiver.Ack {
					acked.Add(1)
					if upAt.Load() != 0 {
						firstOK.CompareAndSwap(0, since())
					}
				}
				if res.Err != nil && !errors.Is(res.Err, errPoolerHandler) && logged.Add(1) <= 3 {
					t.Logf("during the restart: %s: %v", res.Reason, res.Err)
				}
			})
			<-restarted
			if restartErr != nil {
				t.Fatal(restartErr)
			}
			lost := o.checkOnce(t, nkeys)
			ms := func(ns int64) float64 { return float64(ns) / 1e6 }
			recovered := "no delivery succeeded after the restart"
			if f := firstOK.Load(); f != 0 {
				recovered = fmt.Sprintf("first acknowledgement %.1f ms after the restart began, %.1f ms after pg_ctl returned", ms(f-restartAt.Load()), ms(f-upAt.Load()))
			}
			t.Logf("restart -m %s: pg_ctl took %.0f ms; %d deliveries, %d acks (%d duplicates), %d requeues, %d failed on the database, %d commits whose answer was lost; %s",
				mode, float64(restartDur)/1e6, o.deliveries.Load(), o.acks.Load(), o.duplicates.Load(), o.requeues.Load(), o.failures.Load(), lost, recovered)
		})
	}
}
