package inbox_test

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"testing"

	"github.com/acemq/msgaudit/inbox"
	"github.com/acemq/msgaudit/receiver"
)

var errHandler = errors.New("handler failed on purpose")

// TestFlow is the documented per-delivery flow, one case per outcome, on
// SQLite and PostgreSQL.
func TestFlow(t *testing.T) {
	forEachBackend(t, func(t *testing.T, newBackend func(t testing.TB) *backend) {
		b := newBackend(t)
		ib := b.newInbox(t, inbox.Options{})

		type want struct {
			action   receiver.Action
			reason   string
			err      error // errors.Is of Result.Err, when non-nil
			ran      bool
			recorded bool // the key's row is committed
			applied  int  // the effect's committed count
		}
		cases := []struct {
			name string
			// before runs first (for example an earlier delivery).
			before func(t *testing.T, key string)
			h      func(t *testing.T, key string) func(ctx context.Context, tx *sql.Tx, m *receiver.Message) error
			want   want
		}{
			{
				name: "new: handler runs in the transaction, commit, row present",
				h: func(t *testing.T, key string) func(context.Context, *sql.Tx, *receiver.Message) error {
					return func(ctx context.Context, tx *sql.Tx, m *receiver.Message) error {
						if got, ok := inbox.Tx(ctx); !ok || got != tx {
							t.Errorf("inbox.Tx(ctx) = %v, %v; want the handler's tx", got, ok)
						}
						// Uncommitted: another connection does not see the key yet.
						if contains(t, ib, key) {
							t.Errorf("key %q visible outside the transaction before the commit", key)
						}
						return b.apply(ctx, tx, m.Key, "ok")
					}
				},
				want: want{action: receiver.Ack, ran: true, recorded: true, applied: 1},
			},
			{
				name: "duplicate: rejected by the inbox, handler not run",
				before: func(t *testing.T, key string) {
					r := newReceiver(t, ib, nil)
					res := process(t, r, msg(key), inbox.Handler(func(ctx context.Context, tx *sql.Tx, m *receiver.Message) error {
						return b.apply(ctx, tx, m.Key, "ok")
					}))
					if res.Action != receiver.Ack {
						t.Fatalf("first delivery: %+v", res)
					}
				},
				h: func(t *testing.T, key string) func(context.Context, *sql.Tx, *receiver.Message) error {
					return func(ctx context.Context, tx *sql.Tx, m *receiver.Message) error {
						t.Errorf("handler ran for a recorded key %q", key)
						return b.apply(ctx, tx, m.Key, "ok")
					}
				},
				want: want{action: receiver.Ack, reason: "inbox", recorded: true, applied: 1},
			},
			{
				name: "handler error: rollback, no row, effect gone, requeue",
				h: func(t *testing.T, key string) func(context.Context, *sql.Tx, *receiver.Message) error {
					return func(ctx context.Context, tx *sql.Tx, m *receiver.Message) error {
						if err := b.apply(ctx, tx, m.Key, "ok"); err != nil {
							return err
						}
						return errHandler
					}
				},
				want: want{action: receiver.Requeue, reason: "handler-error", err: errHandler, ran: true},
			},
			{
				name: "handler panic: rollback, no row, effect gone, requeue",
				h: func(t *testing.T, key string) func(context.Context, *sql.Tx, *receiver.Message) error {
					return func(ctx context.Context, tx *sql.Tx, m *receiver.Message) error {
						if err := b.apply(ctx, tx, m.Key, "ok"); err != nil {
							return err
						}
						panic("handler panics on purpose")
					}
				},
				want: want{action: receiver.Requeue, reason: "panic", err: receiver.ErrPanic, ran: true},
			},
			{
				name: "commit fails (deferred constraint): requeue, not ack, no row",
				h: func(t *testing.T, key string) func(context.Context, *sql.Tx, *receiver.Message) error {
					return func(ctx context.Context, tx *sql.Tx, m *receiver.Message) error {
						return b.apply(ctx, tx, m.Key, "bad")
					}
				},
				want: want{action: receiver.Requeue, reason: "confirm-error", err: inbox.ErrCommit, ran: true},
			},
			{
				name: "handler commits the transaction itself: clear error, requeue",
				h: func(t *testing.T, key string) func(context.Context, *sql.Tx, *receiver.Message) error {
					return func(ctx context.Context, tx *sql.Tx, m *receiver.Message) error {
						if err := b.apply(ctx, tx, m.Key, "ok"); err != nil {
							return err
						}
						return tx.Commit()
					}
				},
				// The handler's own commit made effect and key durable together:
				// the redelivery will be a duplicate.
				want: want{action: receiver.Requeue, reason: "confirm-error", err: inbox.ErrTxEnded, ran: true, recorded: true, applied: 1},
			},
			{
				name: "handler rolls the transaction back itself: clear error, requeue",
				h: func(t *testing.T, key string) func(context.Context, *sql.Tx, *receiver.Message) error {
					return func(ctx context.Context, tx *sql.Tx, m *receiver.Message) error {
						if err := b.apply(ctx, tx, m.Key, "ok"); err != nil {
							return err
						}
						return tx.Rollback()
					}
				},
				want: want{action: receiver.Requeue, reason: "confirm-error", err: inbox.ErrTxEnded, ran: true},
			},
		}
		for _, c := range cases {
			t.Run(c.name, func(t *testing.T) {
				key := "k-" + randHex(6)
				if c.before != nil {
					c.before(t, key)
				}
				r := newReceiver(t, ib, nil)
				res := process(t, r, msg(key), inbox.Handler(c.h(t, key)))
				w := c.want
				if res.Action != w.action || res.Ran != w.ran || (w.reason != "" && res.Reason != w.reason) {
					t.Errorf("result %v reason %q ran %v err %v; want %v reason %q ran %v",
						res.Action, res.Reason, res.Ran, res.Err, w.action, w.reason, w.ran)
				}
				if w.err != nil && !errors.Is(res.Err, w.err) {
					t.Errorf("Result.Err = %v; want one matching %v", res.Err, w.err)
				}
				if got := contains(t, ib, key); got != w.recorded {
					t.Errorf("key recorded = %v; want %v", got, w.recorded)
				}
				if got := b.applied(t, key); got != w.applied {
					t.Errorf("effect applied %d times; want %d", got, w.applied)
				}
				if n := b.db.Stats().InUse; n != 0 {
					t.Errorf("%d connections still in use after Process: a transaction was left open", n)
				}
				// Whatever happened, a redelivery to a fresh receiver with a
				// good handler leaves exactly one effect and acknowledges.
				res = process(t, newReceiver(t, ib, nil), msg(key), inbox.Handler(func(ctx context.Context, tx *sql.Tx, m *receiver.Message) error {
					return b.apply(ctx, tx, m.Key, "ok")
				}))
				if res.Action != receiver.Ack {
					t.Errorf("redelivery: %v (%s, %v); want ack", res.Action, res.Reason, res.Err)
				}
				if got := b.applied(t, key); got != 1 {
					t.Errorf("after the redelivery the effect is applied %d times; want 1", got)
				}
			})
		}
	})
}

// TestLongKeys: keys beyond MaxKeyLength are hashed, never truncated, so two
// long keys differing only in their last byte stay distinct; keys that a
// collation would take for one (case, a trailing space, the encoding of an
// accent) are distinct too, compared byte for byte.
func TestLongKeys(t *testing.T) {
	forEachBackend(t, func(t *testing.T, newBackend func(t testing.TB) *backend) {
		b := newBackend(t)
		ib := b.newInbox(t, inbox.Options{MaxKeyLength: 16})
		long := strings.Repeat("x", 300)
		keys := []string{long + "a", long + "b", "short", strings.Repeat("y", 16), "sha256:looks-hashed", "nul\x00byte",
			"key", "Key", "KEY", "key ", "kéy", "ke\u0301y"}
		r := newReceiver(t, ib, nil)
		h := inbox.Handler(func(ctx context.Context, tx *sql.Tx, m *receiver.Message) error { return nil })
		for _, k := range keys {
			if res := process(t, r, msg(k), h); res.Action != receiver.Ack || res.Duplicate {
				t.Errorf("key %.20q…: %v duplicate=%v (%s, %v); want a new ack", k, res.Action, res.Duplicate, res.Reason, res.Err)
			}
		}
		for _, k := range keys {
			if !contains(t, ib, k) {
				t.Errorf("key %.20q… not recorded", k)
			}
			if res := process(t, newReceiver(t, ib, nil), msg(k), h); res.Reason != "inbox" {
				t.Errorf("redelivery of %.20q…: %v %s; want a duplicate by the inbox", k, res.Action, res.Reason)
			}
		}
		if contains(t, ib, long+"c") {
			t.Errorf("an unrecorded long key sharing the others' prefix is reported recorded")
		}
	})
}

// TestNoTx: the handler never runs without the inbox's transaction.
func TestNoTx(t *testing.T) {
	ran := false
	h := inbox.Handler(func(ctx context.Context, tx *sql.Tx, m *receiver.Message) error { ran = true; return nil })
	if err := h(context.Background(), msg("k")); !errors.Is(err, inbox.ErrNoTx) {
		t.Errorf("handler without a transaction returned %v; want ErrNoTx", err)
	}
	// Through a receiver without the inbox: the delivery is requeued.
	r, err := receiver.New(receiver.Config{MemoryOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	res := r.Process(context.Background(), msg("k"), h)
	if res.Action == receiver.Ack || !errors.Is(res.Err, inbox.ErrNoTx) {
		t.Errorf("receiver without an inbox: %v, %v; want a requeue with ErrNoTx", res.Action, res.Err)
	}
	if ran {
		t.Error("the handler ran without a transaction")
	}
}
