package inbox_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/acemq/msgaudit/inbox"
	"github.com/acemq/msgaudit/receiver"
	"github.com/jackc/pgx/v5/pgconn"
)

// TestBatchCommitCut: the connection to PostgreSQL (a tcpproxy in front of
// it) is cut as the COMMIT of a five-member batch is sent. Every member is
// requeued with ErrCommit, none acknowledged; the redeliveries apply each
// message once.
func TestBatchCommitCut(t *testing.T) {
	b := newPostgres(t, true)
	ib := b.newInbox(t, inbox.Options{Lanes: 1, MaxBatch: 63, Linger: time.Minute})
	good := func(ctx context.Context, tx *sql.Tx, m *receiver.Message) error { return b.apply(ctx, tx, m.Key, "ok") }
	keys := make([]string, 5)
	for i := range keys {
		keys[i] = fmt.Sprintf("cut%d-%s", i, randHex(6))
	}
	before := b.trace.fired()
	b.trace.arm("commit")
	res := runBatch(t, ib, newReceiver(t, ib, nil), keys, func(int) func(context.Context, *sql.Tx, *receiver.Message) error { return good })
	b.trace.arm("")
	b.down(false)
	if b.trace.fired() != before+1 {
		t.Fatalf("the cut at COMMIT never happened (results %v)", res)
	}
	for i, r := range res {
		if r.Action != receiver.Requeue || !errors.Is(r.Err, inbox.ErrCommit) {
			t.Errorf("member %d: %v (%s, %v); want a requeue with ErrCommit", i, r.Action, r.Reason, r.Err)
		}
	}
	for i, key := range keys {
		if again := process(t, newReceiver(t, ib, nil), msg(key), inbox.Handler(good)); again.Action != receiver.Ack {
			t.Errorf("member %d redelivered: %v (%s, %v); want an ack", i, again.Action, again.Reason, again.Err)
		}
		if n := b.applied(t, key); n != 1 {
			t.Errorf("member %d applied %d times; want once", i, n)
		}
	}
}

// TestCrossLaneDeadlock: lane X holds key 1 uncommitted and its next
// member inserts key 2, which lane Y holds uncommitted while its next
// member inserts key 1. Neither lane can commit: PostgreSQL's deadlock
// detector fails one INSERT (40P01), whose delivery alone is requeued; its
// lane commits, the other INSERT finds the key, and nothing hangs. Each
// effect commits once.
func TestCrossLaneDeadlock(t *testing.T) {
	b := newPostgres(t, false)
	ib := b.newInbox(t, inbox.Options{Lanes: 2, MaxBatch: 63, Linger: time.Minute})
	k1, k2 := "dl1-"+randHex(6), "dl2-"+randHex(6)
	type run struct {
		key     string
		release chan struct{}
		in      chan struct{}
		done    chan receiver.Result
	}
	start := func(key string, hold bool) *run {
		r := &run{key: key, release: make(chan struct{}), in: make(chan struct{}), done: make(chan receiver.Result, 1)}
		if !hold {
			close(r.release)
		}
		go func() {
			// A receiver each: their memory tiers must not see each other.
			r.done <- process(t, newReceiver(t, ib, nil), msg(key), inbox.Handler(func(ctx context.Context, tx *sql.Tx, m *receiver.Message) error {
				if err := b.apply(ctx, tx, m.Key, "ok"); err != nil {
					return err
				}
				close(r.in)
				<-r.release
				return nil
			}))
		}()
		return r
	}
	inHandler := func(r *run) {
		select {
		case <-r.in:
		case <-time.After(30 * time.Second):
			t.Fatalf("delivery of %s never reached its handler", r.key)
		}
	}
	a1 := start(k1, true)
	inHandler(a1)
	b1 := start(k2, true)
	inHandler(b1)
	a2 := start(k2, false)
	waitFor(t, "the second delivery of key 2 to wait for a lane", func() bool { return inbox.Waiting(ib) == 1 })
	b2 := start(k1, false)
	waitFor(t, "the second delivery of key 1 to wait for a lane", func() bool { return inbox.Waiting(ib) == 2 })
	close(a1.release) // lane X → a2, whose INSERT of key 2 waits for lane Y
	waitBlocked(t, b, b.table)
	close(b1.release) // lane Y → b2, whose INSERT of key 1 waits for lane X: deadlock
	results := map[*run]receiver.Result{}
	for _, r := range []*run{a1, b1, a2, b2} {
		select {
		case res := <-r.done:
			results[r] = res
		case <-time.After(60 * time.Second):
			t.Fatal("the cross-lane deadlock did not resolve within a minute")
		}
	}
	for _, r := range []*run{a1, b1} {
		if res := results[r]; res.Action != receiver.Ack || res.Duplicate {
			t.Errorf("first delivery of %s: %v (%s, %v); want an ack of new work", r.key, res.Action, res.Reason, res.Err)
		}
	}
	victims := 0
	for _, r := range []*run{a2, b2} {
		res := results[r]
		var pe *pgconn.PgError
		switch {
		case res.Action == receiver.Requeue && errors.As(res.Err, &pe) && pe.Code == "40P01":
			victims++
			if !strings.Contains(res.Err.Error(), "serialization race") {
				t.Errorf("deadlock victim's error %q does not say it lost a race", res.Err)
			}
			if again := process(t, newReceiver(t, ib, nil), msg(r.key), inbox.Handler(func(context.Context, *sql.Tx, *receiver.Message) error {
				t.Errorf("redelivery of %s ran its handler", r.key)
				return nil
			})); again.Action != receiver.Ack || !again.Duplicate {
				t.Errorf("victim %s redelivered: %v (%s, %v); want a duplicate ack", r.key, again.Action, again.Reason, again.Err)
			}
		case res.Action == receiver.Ack && res.Duplicate:
		default:
			t.Errorf("second delivery of %s: %v (%s, %v); want a deadlock requeue or a duplicate ack", r.key, res.Action, res.Reason, res.Err)
		}
	}
	if victims != 1 {
		t.Errorf("%d deadlock victims; want 1", victims)
	}
	for _, k := range []string{k1, k2} {
		if n := b.applied(t, k); n != 1 {
			t.Errorf("%s applied %d times; want once", k, n)
		}
	}
}
