package oteltrace_test

import (
	"context"
	"database/sql"
	"errors"
	"path/filepath"
	"testing"

	"github.com/acemq/msgaudit/inbox"
	"github.com/acemq/msgaudit/receiver"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	_ "modernc.org/sqlite"
)

// TestInbox: with the transactional inbox (SQLite), the inbox tier's
// insert is an event, the handler gets both the inbox's transaction and
// its span, the commit is the settle span, a failed handler's rollback is
// a failed settlement, and after a restart the redelivery is rejected by
// the inbox tier, marked a duplicate.
func TestInbox(t *testing.T) {
	ctx := context.Background()
	db, err := sql.Open("sqlite", "file:"+filepath.Join(t.TempDir(), "app.db")+
		"?_txlock=immediate&_pragma=busy_timeout(5000)&_pragma=journal_mode(WAL)")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	if _, err := db.ExecContext(ctx, `CREATE TABLE payments (id TEXT PRIMARY KEY)`); err != nil {
		t.Fatal(err)
	}
	ib, err := inbox.New(ctx, db, inbox.Options{Dialect: inbox.SQLite})
	if err != nil {
		t.Fatal(err)
	}
	tr, rec, _ := newTracer(t, "activemq")
	var inHandler []trace.SpanContext
	fail := true
	pay := inbox.Handler(func(ctx context.Context, tx *sql.Tx, m *receiver.Message) error {
		inHandler = append(inHandler, trace.SpanContextFromContext(ctx))
		if _, err := tx.ExecContext(ctx, `INSERT INTO payments (id) VALUES (?)`, m.Key); err != nil {
			return err
		}
		if fail {
			fail = false
			return errors.New("declined")
		}
		return nil
	})
	p := []producer{newProducer(t), newProducer(t), newProducer(t)}
	wantEvents := []string{"memory:accept inbox:accept", "memory:accept inbox:accept", "memory:accept inbox:reject"}
	wantSettle := []string{"failed", "completed", "completed"}
	for i := range p {
		// A new receiver each time: the third is a restart, whose memory
		// is empty, so only the inbox knows the key.
		r, err := receiver.New(receiver.Config{Inbox: ib, Observer: tr})
		if err != nil {
			t.Fatal(err)
		}
		res := r.Process(ctx, message("pay-1", &p[i]), pay)
		deliveries, others := spans(rec)
		s := delivery(t, deliveries, p[i])
		if got := selectEvents(s); got != wantEvents[i] {
			t.Errorf("delivery %d: select events %q; want %q", i+1, got, wantEvents[i])
		}
		st := children(others, s)[settleSpan]
		if len(st) != 1 || attrs(st[0].Attributes())["msgaudit.settlement"].AsString() != wantSettle[i] {
			t.Errorf("delivery %d: settle spans %d; want one, %s", i+1, len(st), wantSettle[i])
		}
		a := attrs(s.Attributes())
		switch i {
		case 0:
			if res.Action != receiver.Requeue || s.Status().Code != codes.Error {
				t.Errorf("declined payment: %+v, status %v; want a requeue, status Error", res, s.Status())
			}
		case 1:
			h := children(others, s)[handlerSpan]
			if res.Action != receiver.Ack || len(h) != 1 || len(inHandler) != 2 || inHandler[1].SpanID() != h[0].SpanContext().SpanID() {
				t.Errorf("payment: %+v, handler spans %d, handler contexts %v; want an ack and the handler in its span", res, len(h), inHandler)
			}
		case 2:
			if !res.Duplicate || !a["msgaudit.duplicate"].AsBool() || a["msgaudit.reason"].AsString() != "inbox" || len(inHandler) != 2 {
				t.Errorf("redelivery after a restart: %+v, duplicate=%v reason=%q, handler runs %d; want a duplicate known to the inbox, unhandled",
					res, a["msgaudit.duplicate"].String(), a["msgaudit.reason"].AsString(), len(inHandler))
			}
		}
	}
	var n int
	if err := db.QueryRowContext(ctx, `SELECT count(*) FROM payments`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 1 {
		t.Errorf("%d payments; want 1", n)
	}
	t.Logf("spans:\n%s", describe(rec))
}
