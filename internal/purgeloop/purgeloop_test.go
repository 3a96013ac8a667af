package purgeloop_test

import (
	"context"
	"errors"
	"github.com/acemq/msgaudit/internal/testkit/logbuf"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/acemq/msgaudit/internal/purgeloop"
	"github.com/acemq/msgaudit/internal/testkit/testwait"
)

const loopFn = "purgeloop.(*Loop).run"

// TestLoopRunsLogsAndStops: the loop calls the purge again and again, logs
// a failed call, and Stop cancels the call in progress, waits for it to
// return and leaves no goroutine behind.
func TestLoopRunsLogsAndStops(t *testing.T) {
	var (
		calls    atomic.Int64
		inside   = make(chan struct{})
		returned atomic.Bool
		logs     logbuf.Buffer
	)
	log := slog.New(slog.NewTextHandler(&logs, nil))
	l := purgeloop.Start(time.Millisecond, "test", log, func(ctx context.Context) (int64, error) {
		switch calls.Add(1) {
		case 1:
			return 3, errors.New("boom")
		case 2:
			return 5, nil
		case 3:
			close(inside)
			<-ctx.Done() // a purge in progress: Stop must cancel and wait for it
			time.Sleep(50 * time.Millisecond)
			returned.Store(true)
			return 0, ctx.Err()
		}
		t.Error("purge called after Stop cancelled it")
		return 0, nil
	})
	testwait.Recv(t, inside, testwait.Long, "the third purge call")
	l.Stop()
	if !returned.Load() {
		t.Fatal("Stop returned before the purge in progress did")
	}
	testwait.NoGoroutine(t, testwait.Long, loopFn)
	l.Stop() // a second Stop is harmless
	if got := calls.Load(); got != 3 {
		t.Fatalf("purge called %d times, want 3", got)
	}
	out := logs.String()
	if !strings.Contains(out, "boom") || strings.Count(out, "level=WARN") != 1 {
		t.Fatalf("want one warning naming the failed purge (and none for the cancelled one), got:\n%s", out)
	}
}

// TestLoopOff: an interval of zero or less starts no goroutine, and Stop
// returns at once.
func TestLoopOff(t *testing.T) {
	for _, d := range []time.Duration{0, -time.Second} {
		l := purgeloop.Start(d, "test", nil, func(context.Context) (int64, error) {
			t.Error("purge called with the loop off")
			return 0, nil
		})
		if g := testwait.Goroutines(loopFn); len(g) != 0 {
			t.Fatalf("interval %v: a loop goroutine runs:\n%s", d, g[0])
		}
		l.Stop()
	}
}

// TestCounters: Observe adds up passes, rows, errors and time.
func TestCounters(t *testing.T) {
	var c purgeloop.Counters
	c.Observe(10, time.Second, nil)
	c.Observe(2, 2*time.Second, errors.New("x"))
	c.Observe(0, 0, nil)
	runs, rows, errs, busy := c.Load()
	if runs != 3 || rows != 12 || errs != 1 || busy != 3*time.Second {
		t.Fatalf("Load = %d runs, %d rows, %d errors, %v; want 3, 12, 1, 3s", runs, rows, errs, busy)
	}
}

// TestBatches: Batches runs batches until a short one, waits after each
// full batch pace times as long as it took, and stops at an error or
// when ctx ends, returning what was deleted so far.
func TestBatches(t *testing.T) {
	ctx := context.Background()
	var calls int
	left := int64(25)
	one := func(context.Context) (int64, error) {
		calls++
		n := min(left, 10)
		left -= n
		time.Sleep(2 * time.Millisecond)
		return n, nil
	}
	t0 := time.Now()
	n, err := purgeloop.Batches(ctx, 10, 3, one)
	took := time.Since(t0)
	if err != nil || n != 25 || calls != 3 {
		t.Fatalf("Batches = %d, %v after %d calls; want 25 rows in 3 calls", n, err, calls)
	}
	// Two full batches of at least 2 ms, each followed by a wait of at
	// least 3 times that: at least 2*(2+6)+2 ms.
	if took < 18*time.Millisecond {
		t.Fatalf("Batches with pace 3 took %v, under the 18 ms its waits alone take", took)
	}
	calls = 0
	n, err = purgeloop.Batches(ctx, 10, purgeloop.Unpaced, func(context.Context) (int64, error) {
		calls++
		if calls == 2 {
			return 4, errors.New("boom")
		}
		return 10, nil
	})
	if err == nil || n != 14 {
		t.Fatalf("Batches with a failing batch = %d, %v; want 14 rows and the error", n, err)
	}
	cctx, cancel := context.WithCancel(ctx)
	n, err = purgeloop.Batches(cctx, 10, 1000, func(context.Context) (int64, error) {
		cancel() // ends ctx during the first batch: the wait after it ends at once
		return 10, nil
	})
	if !errors.Is(err, context.Canceled) || n != 10 {
		t.Fatalf("Batches cancelled during its wait = %d, %v; want 10 rows and context.Canceled", n, err)
	}
}
