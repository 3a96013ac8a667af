package pgstore_test

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/acemq/msgaudit/idempotency"
	"github.com/acemq/msgaudit/idempotency/pgstore"
	"github.com/acemq/msgaudit/internal/claimkit"
	"github.com/acemq/msgaudit/internal/testkit/pgrestart"
	"github.com/acemq/msgaudit/internal/testkit/storetestkit"
	"github.com/acemq/msgaudit/internal/testkit/testwait"
)

// restartKey is what the restart run knows about one key.
type restartKey struct {
	confirmSent bool // a Confirm (or ConfirmBatch) carrying its claim was sent: it may have committed
	acked       bool // a Confirm answered nil, or a TryClaim AlreadyConfirmed after confirmSent
}

// TestPostgresPrimaryRestart: claims and confirms from 8 goroutines (half
// single-key calls, half batches of 8) on the private PostgreSQL
// instance, which is restarted in the middle of the run (pg_ctl restart -m
// fast, and in a second run -m immediate, a crash and recovery). The pool
// reconnects by itself; calls during the outage fail with errors and are
// retried. What must hold:
//
//   - no false verdict: AlreadyConfirmed only for a key whose confirm was
//     sent, Claimed never for a key already acknowledged as confirmed
//     (retention is an hour);
//   - afterwards the table holds every acknowledged key as confirmed, and
//     no confirmed key whose confirm was never sent.
//
// It logs the errors seen and the time from the restart's start until the
// first successful call after the server came back.
func TestPostgresPrimaryRestart(t *testing.T) {
	in := pgrestart.Open(t)
	for _, mode := range []string{"fast", "immediate"} {
		t.Run(mode, func(t *testing.T) { restartRun(t, in, mode) })
	}
}

func restartRun(t *testing.T, in *pgrestart.Instance, mode string) {
	ctx := testwait.Context(t, 4*time.Minute)
	table := "msgaudit_restart_" + storetestkit.Hex(8)
	raw := storetestkit.WithQuery(in.URL, "pool_max_conns=8&connect_timeout=5&msgaudit_table="+table)
	o := idempotency.Options{ClaimTTL: 2 * time.Second, Retention: time.Hour}
	s, err := pgstore.Open(ctx, raw, pgstore.Options{Options: o})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = s.Close()
		dropTable(t, in.URL, table)
	})

	const nkeys, workers, batch = 2000, 8, 8
	var (
		mu       sync.Mutex
		state    [nkeys]restartKey
		next     atomic.Int64 // next key never tried
		retry    []int        // keys to try again
		ackedN   atomic.Int64
		errs     atomic.Int64
		restarts = make(chan struct{})
		// Timeline of the restart, in nanoseconds since start.
		start                    = time.Now()
		restartAt, upAt, firstOK atomic.Int64
	)
	keyOf := func(i int) idempotency.Key { return idempotency.Key{Namespace: "restart", ID: fmt.Sprint(i)} }
	take := func(n int) []int {
		mu.Lock()
		defer mu.Unlock()
		var out []int
		for len(out) < n && len(retry) > 0 {
			out = append(out, retry[0])
			retry = retry[1:]
		}
		for len(out) < n {
			i := int(next.Add(1) - 1)
			if i >= nkeys {
				break
			}
			out = append(out, i)
		}
		return out
	}
	giveBack := func(keys ...int) {
		mu.Lock()
		retry = append(retry, keys...)
		mu.Unlock()
	}
	ok := func() {
		if up := upAt.Load(); up != 0 && firstOK.Load() == 0 {
			firstOK.CompareAndSwap(0, int64(time.Since(start)))
		}
	}
	fail := func(err error) {
		errs.Add(1)
		if errs.Load() <= 3 {
			t.Logf("during the restart: %v", err)
		}
	}
	// verdict checks one TryClaim answer against what the run knows and
	// records what it implies; it reports whether the key holds a claim of
	// ours now.
	verdict := func(i int, out idempotency.Outcome) bool {
		mu.Lock()
		defer mu.Unlock()
		st := &state[i]
		switch out {
		case idempotency.AlreadyConfirmed:
			if !st.confirmSent {
				t.Errorf("key %d: AlreadyConfirmed, but no confirm was ever sent (a false verdict)", i)
			}
			if !st.acked {
				st.acked = true
				ackedN.Add(1)
			}
		case idempotency.Claimed:
			if st.acked {
				t.Errorf("key %d: Claimed, but it was acknowledged as confirmed (a false verdict)", i)
			}
			return true
		}
		return false
	}
	confirmed := func(i int) {
		mu.Lock()
		defer mu.Unlock()
		if !state[i].acked {
			state[i].acked = true
			ackedN.Add(1)
		}
	}
	sent := func(i int) {
		mu.Lock()
		state[i].confirmSent = true
		mu.Unlock()
	}
	settled := func(i int) bool {
		mu.Lock()
		defer mu.Unlock()
		return state[i].acked
	}

	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			size := 1
			if w%2 == 1 {
				size = batch
			}
			for ackedN.Load() < nkeys && ctx.Err() == nil {
				ids := take(size)
				if len(ids) == 0 {
					time.Sleep(20 * time.Millisecond) // the rest are in other workers' hands
					continue
				}
				keys := make([]idempotency.Key, len(ids))
				for j, i := range ids {
					keys[j] = keyOf(i)
				}
				res := make([]idempotency.ClaimResult, len(ids))
				var err error
				if size == 1 {
					res[0].Outcome, res[0].Claim, err = s.TryClaim(ctx, keys[0])
				} else {
					err = s.TryClaimBatch(ctx, keys, res)
				}
				if err != nil {
					fail(err)
					giveBack(ids...)
					time.Sleep(50 * time.Millisecond)
					continue
				}
				ok()
				var claims []idempotency.Claim
				var claimIDs, later []int
				for j, i := range ids {
					if res[j].Err != nil {
						t.Errorf("key %d: %v", i, res[j].Err)
						continue
					}
					if verdict(i, res[j].Outcome) {
						claims = append(claims, res[j].Claim)
						claimIDs = append(claimIDs, i)
					} else if !settled(i) {
						later = append(later, i) // in progress: a lost claim of ours, until its lease ends
					}
				}
				giveBack(later...)
				if len(claims) == 0 {
					continue
				}
				for _, i := range claimIDs {
					sent(i)
				}
				cerrs := make([]error, len(claims))
				if size == 1 {
					cerrs[0] = s.Confirm(ctx, claims[0])
				} else {
					err = s.ConfirmBatch(ctx, claims, cerrs)
				}
				if err != nil {
					fail(err)
					giveBack(claimIDs...)
					continue
				}
				for j, i := range claimIDs {
					switch {
					case cerrs[j] == nil:
						ok()
						confirmed(i)
					default:
						// ErrClaimLost cannot happen within the 2 s lease
						// unless the run stalls; an error is an outage.
						fail(cerrs[j])
						giveBack(i)
					}
				}
			}
		}()
	}
	// The restart, once a quarter of the keys are confirmed.
	var restartDur time.Duration
	var restartErr error
	go func() {
		defer close(restarts)
		for ackedN.Load() < nkeys/4 && ctx.Err() == nil {
			time.Sleep(5 * time.Millisecond)
		}
		restartAt.Store(int64(time.Since(start)))
		restartDur, restartErr = in.Restart(ctx, mode)
		upAt.Store(int64(time.Since(start)))
	}()
	testwait.Group(t, &wg, 4*time.Minute, "the end of the claiming workers")
	<-restarts
	if restartErr != nil {
		t.Fatal(restartErr)
	}
	if n := ackedN.Load(); n != nkeys {
		t.Fatalf("%d of %d keys confirmed before the deadline", n, nkeys)
	}

	// The table against what was acknowledged.
	pool, err := pgxpool.New(ctx, in.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	rows, err := pool.Query(ctx, `SELECT key, state FROM `+pgx.Identifier{table}.Sanitize())
	if err != nil {
		t.Fatal(err)
	}
	inTable := map[string]string{}
	for rows.Next() {
		var k, st string
		if err := rows.Scan(&k, &st); err != nil {
			t.Fatal(err)
		}
		inTable[k] = st
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	for i := range nkeys {
		sk := claimkit.StorageKey(keyOf(i), 0)
		if got := inTable[sk]; state[i].acked && got != "confirmed" {
			t.Errorf("key %d acknowledged as confirmed, but its row is %q", i, got)
		}
		if inTable[sk] == "confirmed" && !state[i].confirmSent {
			t.Errorf("key %d confirmed in the table without a confirm ever sent", i)
		}
	}
	ms := func(ns int64) float64 { return float64(ns) / 1e6 }
	recover := "no call succeeded after the restart"
	if f := firstOK.Load(); f != 0 {
		recover = fmt.Sprintf("first success %.1f ms after the restart began, %.1f ms after pg_ctl returned", ms(f-restartAt.Load()), ms(f-upAt.Load()))
	}
	t.Logf("restart -m %s: pg_ctl took %.0f ms; %d errors; %s; %d keys confirmed",
		mode, float64(restartDur)/1e6, errs.Load(), recover, ackedN.Load())
}
