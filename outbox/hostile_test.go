package outbox_test

import (
	"context"
	"database/sql"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/acemq/msgaudit/inbox"
	"github.com/acemq/msgaudit/internal/testkit/logbuf"
	"github.com/acemq/msgaudit/outbox"
	"github.com/acemq/msgaudit/receiver"
)

// TestSameKeyTwoNamespacesTwoIDs: the same key delivered on two
// destinations is two deliveries; what each handler sends gets its own
// id, and both leave.
func TestSameKeyTwoNamespacesTwoIDs(t *testing.T) {
	d := sqliteDB(t)
	ctx := context.Background()
	ob := d.outbox(t, outbox.Options{})
	r := inboxReceiver(t, d, "_in")
	h := inbox.Handler(func(ctx context.Context, tx *sql.Tx, m *receiver.Message) error {
		return ob.Send(ctx, tx, outbox.Message{Destination: "out", Body: []byte(m.Destination)})
	})
	// "/queue/a" + key "b:c" and "/queue/a:b" + key "c" must not share an id.
	for _, m := range []*receiver.Message{{Key: "b:c", Destination: "/queue/a"}, {Key: "c", Destination: "/queue/a:b"}} {
		if res := r.Process(ctx, m, h); res.Action != receiver.Ack || res.Duplicate {
			t.Fatalf("%+v: %+v", m, res)
		}
	}
	p := &recorder{}
	relay(t, ob, p)
	eventually(t, "both messages", func() bool { return len(p.confirmed()) == 2 })
	if got := p.confirmed(); got[0].id == got[1].id {
		t.Fatalf("two deliveries sent under one id %q", got[0].id)
	}
}

// TestParkedNeverResent: a parked message is not sent again (no loop
// through the parking), and the broker's reason, however long, is kept
// and logged within a bound.
func TestParkedNeverResent(t *testing.T) {
	d := sqliteDB(t)
	var logs logbuf.Buffer
	ob := d.outbox(t, outbox.Options{MaxAttempts: 2, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	huge := strings.Repeat("x", 1<<20)
	p := &recorder{fail: func(id string, m outbox.Message) error {
		return fmt.Errorf("%w: %s", outbox.ErrRefused, huge)
	}}
	send(t, ob, d.db, true, outbox.Message{Destination: strings.Repeat("d", 1024)})
	relay(t, ob, p)
	var reason string
	eventually(t, "the message parked", func() bool {
		return d.db.QueryRow(`SELECT reason FROM `+d.table+` WHERE state = 2`).Scan(&reason) == nil
	})
	time.Sleep(500 * time.Millisecond) // five more polls
	p.mu.Lock()
	calls := len(p.calls)
	p.mu.Unlock()
	if calls != 2 {
		t.Errorf("the message was tried %d times, want MaxAttempts (2) and never after parking", calls)
	}
	if len(reason) > 8<<10 || !strings.Contains(reason, "refused") {
		t.Errorf("the parked reason holds %d bytes; want the broker's reason within a bound", len(reason))
	}
	if n := len(logs.String()); n > 32<<10 {
		t.Errorf("the relay logged %d bytes for one parked message of a 1 MiB reason", n)
	}
}
