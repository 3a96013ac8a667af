package inbox_test

import (
	"context"
	"database/sql"
	"errors"
	"testing"

	"github.com/acemq/msgaudit/inbox"
	"github.com/acemq/msgaudit/receiver"
)

// TestWrap: the inbox through (*receiver.Receiver).Wrap: nil for
// new work, ErrDuplicate for a recorded key, an ErrRequeue error for a
// failure, each mapped by ActionOf.
func TestWrap(t *testing.T) {
	b := newSQLite(t)
	ib := b.newInbox(t, inbox.Options{})
	fail := false
	apply := inbox.Handler(func(ctx context.Context, tx *sql.Tx, m *receiver.Message) error {
		if err := b.apply(ctx, tx, m.Key, "ok"); err != nil {
			return err
		}
		if fail {
			return errHandler
		}
		return nil
	})
	ctx := context.Background()
	wrap := func() receiver.Handler {
		r, err := receiver.New(receiver.Config{Inbox: ib})
		if err != nil {
			t.Fatal(err)
		}
		return r.Wrap(apply)
	}
	fail = true
	err := wrap()(ctx, msg("w-1"))
	if receiver.ActionOf(err) != receiver.Requeue || !errors.Is(err, errHandler) {
		t.Errorf("failing handler: %v (%v); want requeue", err, receiver.ActionOf(err))
	}
	fail = false
	if err := wrap()(ctx, msg("w-1")); err != nil {
		t.Errorf("new work: %v; want nil", err)
	}
	// A second process (a new Receiver: its own memory) sees the key in the table.
	err = wrap()(ctx, msg("w-1"))
	if !errors.Is(err, receiver.ErrDuplicate) || receiver.ActionOf(err) != receiver.Ack {
		t.Errorf("recorded key: %v; want ErrDuplicate (ack)", err)
	}
	if n := b.applied(t, "w-1"); n != 1 {
		t.Errorf("applied %d times; want 1", n)
	}
}

// TestNamespace: keys are scoped like the idempotency store's: by
// destination (or Options.Namespace) for queues, and per consumer for
// topics, where each subscriber's copy is its own unit of work.
func TestNamespace(t *testing.T) {
	b := newSQLite(t)
	ib := b.newInbox(t, inbox.Options{})
	named := b.newInbox(t, inbox.Options{Namespace: "orders"})
	cases := []struct {
		ib   *inbox.Inbox
		m    *receiver.Message
		want string
	}{
		{ib, &receiver.Message{Key: "k", Destination: "/queue/a", Consumer: "c1"}, "/queue/a"},
		{ib, &receiver.Message{Key: "k", Destination: "/topic/t", Consumer: "c1"}, "/topic/t#c1"},
		{ib, &receiver.Message{Key: "k", Destination: "amqp-queue"}, "amqp-queue"},
		{named, &receiver.Message{Key: "k", Destination: "/queue/a"}, "orders"},
		{named, &receiver.Message{Key: "k", Destination: "/topic/t", Consumer: "c2"}, "orders#c2"},
	}
	for _, c := range cases {
		if got := c.ib.Namespace(c.m); got != c.want {
			t.Errorf("Namespace(%s, %s) = %q; want %q", c.m.Destination, c.m.Consumer, got, c.want)
		}
	}
	// Two subscribers of one topic each apply their copy once.
	h := inbox.Handler(func(ctx context.Context, tx *sql.Tx, m *receiver.Message) error { return nil })
	for _, d := range []struct {
		consumer string
		dup      bool
	}{{"c1", false}, {"c2", false}, {"c1", true}, {"c2", true}} {
		res := process(t, newReceiver(t, ib, nil), &receiver.Message{Key: "t-1", Destination: "/topic/t", Consumer: d.consumer}, h)
		if res.Action != receiver.Ack || res.Duplicate != d.dup {
			t.Errorf("topic copy for %s: %v duplicate=%v; want an ack, duplicate=%v", d.consumer, res.Action, res.Duplicate, d.dup)
		}
	}
	for _, ns := range []string{"/topic/t#c1", "/topic/t#c2"} {
		if ok, err := ib.Contains(context.Background(), ns, "t-1"); err != nil || !ok {
			t.Errorf("Contains(%s, t-1) = %v, %v; want true", ns, ok, err)
		}
	}
}

// TestMetrics: the inbox counts its database calls and their errors in the
// store counters of Options.Metrics; the receiver counts its duplicates.
func TestMetrics(t *testing.T) {
	b := newSQLite(t)
	m := new(receiver.Metrics)
	ib := b.newInbox(t, inbox.Options{Metrics: m})
	h := inbox.Handler(func(ctx context.Context, tx *sql.Tx, m *receiver.Message) error { return nil })
	process(t, newReceiver(t, ib, nil), msg("m-1"), h)
	process(t, newReceiver(t, ib, func(c *receiver.Config) { c.Metrics = m }), msg("m-1"), h)
	s := m.Snapshot()
	// new: BEGIN, SAVEPOINT, INSERT, RELEASE, COMMIT; duplicate: BEGIN,
	// SAVEPOINT, INSERT, ROLLBACK.
	if s.StoreCalls != 9 || s.StoreErrors != 0 || s.DuplicatesOther != 1 {
		t.Errorf("store calls %d errors %d inbox duplicates %d; want 9, 0, 1", s.StoreCalls, s.StoreErrors, s.DuplicatesOther)
	}
	db := b.open(t)
	broken, err := inbox.New(context.Background(), db, inbox.Options{Dialect: inbox.SQLite, Table: b.table, Metrics: m})
	if err != nil {
		t.Fatal(err)
	}
	_ = db.Close()
	process(t, newReceiver(t, broken, nil), msg("m-2"), h)
	if s := m.Snapshot(); s.StoreErrors != 1 {
		t.Errorf("store errors %d after a failed BEGIN; want 1", s.StoreErrors)
	}
}
