package outbox_test

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/acemq/msgaudit/inbox"
	"github.com/acemq/msgaudit/outbox"
	"github.com/acemq/msgaudit/receiver"
)

// TestSendAfterCommitOnly: a rolled-back transaction sends nothing, a
// committed one sends each message once, and the row is then sent.
func TestSendAfterCommitOnly(t *testing.T) {
	forEachDB(t, func(t *testing.T, d *db) {
		ob := d.outbox(t, outbox.Options{})
		send(t, ob, d.db, false, outbox.Message{Destination: "ghost", Body: []byte("never")})
		send(t, ob, d.db, true,
			outbox.Message{Destination: "a", Body: []byte("1"), Headers: map[string]string{"h": "v"}},
			outbox.Message{Destination: "b", Body: nil})
		p := &recorder{}
		relay(t, ob, p)
		eventually(t, "two messages", func() bool { return len(p.confirmed()) == 2 })
		eventually(t, "an empty backlog", func() bool {
			b, err := ob.Backlog(context.Background())
			return err == nil && b.Held == 0
		})
		time.Sleep(200 * time.Millisecond) // two more polls: nothing else leaves
		got := p.confirmed()
		if len(got) != 2 {
			t.Fatalf("published %d messages, want 2: %+v", len(got), got)
		}
		dests := []string{got[0].m.Destination, got[1].m.Destination}
		slices.Sort(dests)
		if dests[0] != "a" || dests[1] != "b" {
			t.Errorf("destinations %v, want [a b] (a rolled-back send must not leave)", dests)
		}
		for _, g := range got {
			if g.m.Destination == "a" && (string(g.m.Body) != "1" || g.m.Headers["h"] != "v") {
				t.Errorf("message a arrived as %+v", g.m)
			}
			if !strings.HasPrefix(g.id, "r-") {
				t.Errorf("id %q of a send outside an inbox handler: want a random id", g.id)
			}
		}
		if got[0].id == got[1].id {
			t.Errorf("two sends share id %q", got[0].id)
		}
	})
}

// TestInboxHandlerIDsStable: a handler that sends and then fails is rolled
// back with its sends; its rerun sends the same ids, and only the
// committed run's messages leave.
func TestInboxHandlerIDsStable(t *testing.T) {
	forEachDB(t, func(t *testing.T, d *db) {
		ctx := context.Background()
		ob := d.outbox(t, outbox.Options{})
		r := inboxReceiver(t, d, "_in")
		runs := 0
		h := inbox.Handler(func(ctx context.Context, tx *sql.Tx, m *receiver.Message) error {
			runs++
			for i := range 2 {
				if err := ob.Send(ctx, tx, outbox.Message{Destination: "next", Body: fmt.Appendf(nil, "%s/%d/run%d", m.Key, i, runs)}); err != nil {
					return err
				}
			}
			if runs == 1 {
				return errors.New("first run fails after sending")
			}
			return nil
		})
		tp := "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
		msg := &receiver.Message{Key: "k1", Destination: "/queue/in", Headers: map[string]string{"traceparent": tp}}
		if res := r.Process(ctx, msg, h); res.Action == receiver.Ack {
			t.Fatalf("first run acked: %+v", res)
		}
		if res := r.Process(ctx, &receiver.Message{Key: "k1", Destination: "/queue/in", Headers: msg.Headers}, h); res.Action != receiver.Ack || res.Duplicate {
			t.Fatalf("second run: %+v", res)
		}
		p := &recorder{}
		relay(t, ob, p)
		eventually(t, "two messages", func() bool { return len(p.confirmed()) == 2 })
		time.Sleep(200 * time.Millisecond)
		got := p.confirmed()
		if len(got) != 2 {
			t.Fatalf("published %d, want 2 (the failed run's sends rolled back): %+v", len(got), got)
		}
		ids := map[string]bool{}
		for _, g := range got {
			if !strings.HasSuffix(string(g.m.Body), "run2") {
				t.Errorf("message %q of the rolled-back run left", g.m.Body)
			}
			if g.m.Headers["traceparent"] != tp {
				t.Errorf("the message's traceparent is %q, want the delivery's %q", g.m.Headers["traceparent"], tp)
			}
			ids[g.id] = true
		}
		// The same delivery run again derives the same ids: what a rerun
		// after a rollback, or another process, sends is recognised.
		ob2 := d.outbox(t, outbox.Options{})
		again := inbox.Handler(func(ctx context.Context, tx *sql.Tx, m *receiver.Message) error {
			for range 2 {
				if err := ob2.Send(ctx, tx, outbox.Message{Destination: "next"}); err != nil {
					return err
				}
			}
			return nil
		})
		r2 := inboxReceiver(t, d, "_in2")
		// A rerun on a second inbox table keyed the same way must fail on
		// the outbox's unique id: the same ids, recorded already.
		res := r2.Process(ctx, &receiver.Message{Key: "k1", Destination: "/queue/in"}, again)
		if res.Action == receiver.Ack {
			t.Errorf("a rerun of the same delivery recorded new ids; want the outbox to refuse the same ids again")
		}
		if len(ids) != 2 {
			t.Errorf("ids %v, want two distinct", ids)
		}
	})
}

// TestSendRefusesBadMessages: what Send cannot record is an error wrapping
// ErrConfig, before anything is written, and the transaction stays usable.
func TestSendRefusesBadMessages(t *testing.T) {
	d := sqliteDB(t)
	ob := d.outbox(t, outbox.Options{})
	big := strings.Repeat("x", 70<<10)
	cases := []struct {
		name string
		m    outbox.Message
	}{
		{"empty destination", outbox.Message{}},
		{"destination with LF", outbox.Message{Destination: "q\nreceipt:x"}},
		{"destination with NUL", outbox.Message{Destination: "q\x00"}},
		{"destination too long", outbox.Message{Destination: strings.Repeat("q", 1025)}},
		{"invalid UTF-8 destination", outbox.Message{Destination: "q\xff"}},
		{"header name with colon", outbox.Message{Destination: "q", Headers: map[string]string{"a:b": "v"}}},
		{"header value with CR", outbox.Message{Destination: "q", Headers: map[string]string{"a": "v\rdestination:x"}}},
		{"header value with LF", outbox.Message{Destination: "q", Headers: map[string]string{"a": "v\nx"}}},
		{"empty header name", outbox.Message{Destination: "q", Headers: map[string]string{"": "v"}}},
		{"the outbox's id header", outbox.Message{Destination: "q", Headers: map[string]string{"Msgaudit-Outbox-Id": "forged"}}},
		{"huge headers", outbox.Message{Destination: "q", Headers: map[string]string{"a": big}}},
		{"huge body", outbox.Message{Destination: "q", Body: make([]byte, 16<<20+1)}},
		{"order key too long", outbox.Message{Destination: "q", OrderKey: strings.Repeat("k", 1025)}},
		{"order key with NUL", outbox.Message{Destination: "q", OrderKey: "k\x00"}},
	}
	ctx := context.Background()
	tx, err := d.db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	for _, c := range cases {
		if err := ob.Send(ctx, tx, c.m); !errors.Is(err, outbox.ErrConfig) {
			t.Errorf("%s: Send = %v, want ErrConfig", c.name, err)
		}
	}
	if err := ob.Send(ctx, tx, outbox.Message{Destination: "q", Body: []byte("ok")}); err != nil {
		t.Fatalf("a good Send after the refused ones: %v", err)
	}
	if err := ob.Send(ctx, nil, outbox.Message{Destination: "q"}); !errors.Is(err, outbox.ErrConfig) {
		t.Errorf("nil tx: %v, want ErrConfig", err)
	}
}

// TestNewRefusesBadOptions: misconfiguration fails at New.
func TestNewRefusesBadOptions(t *testing.T) {
	d := sqliteDB(t)
	ctx := context.Background()
	for _, o := range []outbox.Options{
		{},
		{Dialect: 9},
		{Dialect: inbox.SQLite, Table: "bad name"},
		{Dialect: inbox.SQLite, Table: "temp.t"},
		{Dialect: inbox.SQLite, Lease: time.Millisecond},
		{Dialect: inbox.SQLite, MaxAttempts: -1},
		{Dialect: inbox.SQLite, Concurrency: -1},
		{Dialect: inbox.SQLite, Retention: -1},
		{Dialect: inbox.PostgreSQL},
	} {
		if _, err := outbox.New(ctx, d.db, o); !errors.Is(err, outbox.ErrConfig) {
			t.Errorf("New(%+v) = %v, want ErrConfig", o, err)
		}
	}
	if _, err := outbox.New(ctx, nil, outbox.Options{Dialect: inbox.SQLite}); !errors.Is(err, outbox.ErrConfig) {
		t.Errorf("nil db: %v", err)
	}
}

// TestRefusedIsParked: a message the broker refuses is retried a bounded
// number of times and parked with its reason; the others flow, and a
// transient failure is retried until it succeeds, never parked.
func TestRefusedIsParked(t *testing.T) {
	forEachDB(t, func(t *testing.T, d *db) {
		ob := d.outbox(t, outbox.Options{MaxAttempts: 3})
		var mu sync.Mutex
		flaky := 0
		p := &recorder{fail: func(id string, m outbox.Message) error {
			mu.Lock()
			defer mu.Unlock()
			switch m.Destination {
			case "refused":
				return fmt.Errorf("%w: no such destination %q", outbox.ErrRefused, m.Destination)
			case "flaky":
				if flaky++; flaky <= 4 {
					return errDown
				}
			}
			return nil
		}}
		send(t, ob, d.db, true,
			outbox.Message{Destination: "refused"},
			outbox.Message{Destination: "fine"},
			outbox.Message{Destination: "flaky"})
		relay(t, ob, p)
		eventually(t, "fine and flaky confirmed", func() bool { return len(p.confirmed()) == 2 })
		var state, attempts int
		var reason string
		q := `SELECT state, attempts, reason FROM ` + d.table + ` WHERE destination = ` + d.ph(1)
		eventually(t, "the refused message parked", func() bool {
			err := d.db.QueryRow(q, "refused").Scan(&state, &attempts, &reason)
			return err == nil && state == 2
		})
		if attempts != 3 || !strings.Contains(reason, "no such destination") {
			t.Errorf("parked after %d attempts with reason %q; want 3 and the broker's reason", attempts, reason)
		}
		calls := 0
		p.mu.Lock()
		for _, c := range p.calls {
			if c.m.Destination == "refused" {
				calls++
			}
		}
		p.mu.Unlock()
		if calls != 3 {
			t.Errorf("the refused message was tried %d times, want 3", calls)
		}
		// The last confirmed message is marked just after its confirmation.
		eventually(t, "nothing held (parked rows are not pending)", func() bool {
			b, err := ob.Backlog(context.Background())
			return err == nil && b.Held == 0
		})
	})
}

// TestLeaseLapseResendsSameID: a relay that dies after publishing and
// before marking leaves the row; once the lease lapses another relay
// sends it again with the same id.
func TestLeaseLapseResendsSameID(t *testing.T) {
	forEachDB(t, func(t *testing.T, d *db) {
		ob := d.outbox(t, outbox.Options{Lease: time.Second})
		send(t, ob, d.db, true, outbox.Message{Destination: "q"})
		hang := make(chan struct{})
		first := &recorder{fail: func(string, outbox.Message) error { <-hang; return errors.New("killed") }}
		stop := relay(t, ob, first)
		eventually(t, "the first relay's publish", func() bool {
			first.mu.Lock()
			defer first.mu.Unlock()
			return len(first.calls) == 1
		})
		second := &recorder{}
		relay(t, d.outbox(t, outbox.Options{Lease: time.Second}), second)
		time.Sleep(300 * time.Millisecond)
		if n := len(second.confirmed()); n != 0 {
			t.Fatalf("a second relay sent a message under another's lease (%d)", n)
		}
		eventually(t, "the resend after the lease", func() bool { return len(second.confirmed()) == 1 })
		close(hang)
		stop()
		if a, b := first.calls[0].id, second.confirmed()[0].id; a != b {
			t.Errorf("resend id %q, first id %q: want the same", b, a)
		}
	})
}

// TestClaimBoundedInMemory: a claim holds at most its byte budget of
// bodies (and always one row), so a backlog of large messages is not
// loaded into memory at once; every message still leaves.
func TestClaimBoundedInMemory(t *testing.T) {
	defer outbox.SetClaimBytes(250 << 10)()
	forEachDB(t, func(t *testing.T, d *db) {
		ob := d.outbox(t, outbox.Options{})
		body := make([]byte, 100<<10)
		var ms []outbox.Message
		for i := range 12 {
			body[0] = byte(i)
			ms = append(ms, outbox.Message{Destination: "big", Body: bytes.Clone(body)})
		}
		ms = append(ms, outbox.Message{Destination: "huge", Body: make([]byte, 1<<20)}) // over the budget alone
		send(t, ob, d.db, true, ms...)
		var mu sync.Mutex
		cur, peak := 0, 0
		p := &recorder{fail: func(string, outbox.Message) error {
			mu.Lock()
			cur++
			peak = max(peak, cur)
			mu.Unlock()
			time.Sleep(20 * time.Millisecond)
			mu.Lock()
			cur--
			mu.Unlock()
			return nil
		}}
		relay(t, ob, p)
		eventually(t, "13 messages", func() bool { return len(p.confirmed()) == 13 })
		mu.Lock()
		defer mu.Unlock()
		if peak > 2 {
			t.Errorf("%d messages of 100 KiB in flight at once; a 250 KiB budget holds 2", peak)
		}
		seen := map[byte]bool{}
		for _, c := range p.confirmed() {
			if c.m.Destination == "big" {
				if len(c.m.Body) != 100<<10 {
					t.Fatalf("a body of %d bytes, want %d", len(c.m.Body), 100<<10)
				}
				seen[c.m.Body[0]] = true
			}
		}
		if len(seen) != 12 {
			t.Errorf("%d distinct bodies arrived, want 12", len(seen))
		}
	})
}

// TestPurgeSentRows: Purge and the automatic purge delete sent rows older
// than the retention; pending and parked rows stay.
func TestPurgeSentRows(t *testing.T) {
	forEachDB(t, func(t *testing.T, d *db) {
		ctx := context.Background()
		ob := d.outbox(t, outbox.Options{MaxAttempts: 1})
		p := &recorder{fail: func(id string, m outbox.Message) error {
			if m.Destination == "refused" {
				return outbox.ErrRefused
			}
			return nil
		}}
		send(t, ob, d.db, true, outbox.Message{Destination: "a"}, outbox.Message{Destination: "b"}, outbox.Message{Destination: "refused"})
		stop := relay(t, ob, p)
		count := func(state int) int {
			var n int
			if err := d.db.QueryRow(`SELECT count(*) FROM `+d.table+` WHERE state = `+d.ph(1), state).Scan(&n); err != nil {
				t.Fatal(err)
			}
			return n
		}
		eventually(t, "two sent, one parked", func() bool { return count(1) == 2 && count(2) == 1 })
		stop()
		send(t, ob, d.db, true, outbox.Message{Destination: "pending"})
		if n, err := ob.Purge(ctx, time.Now().Add(-time.Hour)); err != nil || n != 0 {
			t.Fatalf("Purge of rows older than an hour = %d, %v; want 0", n, err)
		}
		n, err := ob.Purge(ctx, time.Now().Add(time.Second))
		if err != nil || n != 2 {
			t.Fatalf("Purge = %d, %v; want the 2 sent rows", n, err)
		}
		if count(0) != 1 || count(2) != 1 {
			t.Errorf("pending %d, parked %d after the purge; want 1 and 1", count(0), count(2))
		}
		if st := ob.PurgeStats(); st.Runs != 2 || st.Rows != 2 {
			t.Errorf("PurgeStats = %+v, want 2 runs and 2 rows", st)
		}
		// The automatic purge.
		auto := d.outbox(t, outbox.Options{Retention: time.Millisecond, PurgeInterval: 50 * time.Millisecond})
		relay(t, auto, &recorder{})
		eventually(t, "the pending row sent and purged", func() bool { return count(0) == 0 && count(1) == 0 })
		if count(2) != 1 {
			t.Errorf("the automatic purge deleted the parked row")
		}
	})
}

// TestSlowPublisherNoDoubleSend: with two relays and a publisher slower
// than a claim can wait for, every message is confirmed once: a relay
// publishes a claim's rows only within half its lease, never after
// another relay may have taken them.
func TestSlowPublisherNoDoubleSend(t *testing.T) {
	d := sqliteDB(t)
	ob := d.outbox(t, outbox.Options{Lease: time.Second, Concurrency: 1})
	var ms []outbox.Message
	for i := range 6 {
		ms = append(ms, outbox.Message{Destination: "q", Body: []byte{byte('0' + i)}})
	}
	send(t, ob, d.db, true, ms...)
	slow := func(string, outbox.Message) error { time.Sleep(300 * time.Millisecond); return nil }
	p := &recorder{fail: slow}
	relay(t, ob, p)
	relay(t, d.outbox(t, outbox.Options{Lease: time.Second, Concurrency: 1}), p)
	distinct := func() int {
		ids := map[string]bool{}
		for _, c := range p.confirmed() {
			ids[c.id] = true
		}
		return len(ids)
	}
	eventually(t, "six messages", func() bool { return distinct() == 6 })
	time.Sleep(time.Second)
	if n := len(p.confirmed()); n != 6 {
		t.Errorf("%d confirmed publishes of 6 messages: a relay published after its lease could lapse", n)
	}
}

// TestPanickingHandlerSendsNothing: a handler that panics after its send
// is rolled back with it; nothing leaves.
func TestPanickingHandlerSendsNothing(t *testing.T) {
	d := sqliteDB(t)
	ctx := context.Background()
	ob := d.outbox(t, outbox.Options{})
	r := inboxReceiver(t, d, "_in")
	h := inbox.Handler(func(ctx context.Context, tx *sql.Tx, m *receiver.Message) error {
		if err := ob.Send(ctx, tx, outbox.Message{Destination: "q", Body: []byte("ghost")}); err != nil {
			return err
		}
		panic("the handler panics after its send")
	})
	if res := r.Process(ctx, &receiver.Message{Key: "k", Destination: "/queue/in"}, h); res.Action == receiver.Ack {
		t.Fatalf("a panicking handler's delivery was acknowledged: %+v", res)
	}
	p := &recorder{}
	relay(t, ob, p)
	time.Sleep(300 * time.Millisecond)
	if got := p.confirmed(); len(got) != 0 {
		t.Fatalf("a panicking handler's send left: %+v", got)
	}
	if b, err := ob.Backlog(ctx); err != nil || b.Held != 0 {
		t.Fatalf("Backlog = %+v, %v; want no row", b, err)
	}
}
