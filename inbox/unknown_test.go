package inbox_test

import (
	"context"
	"database/sql"
	"errors"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/acemq/msgaudit/inbox"
	"github.com/acemq/msgaudit/internal/testkit/testenv"
	"github.com/acemq/msgaudit/receiver"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
)

// dropper closes a connection right after it has written the armed
// statement: the server receives it and runs it, the client never hears
// back. It is a pgx tracer (to arm at the statement) and wraps the dialed
// connections.
type dropper struct {
	mu     sync.Mutex
	prefix string
	armed  bool // drop after the next write
	hits   int
}

func (d *dropper) TraceQueryStart(ctx context.Context, _ *pgx.Conn, q pgx.TraceQueryStartData) context.Context {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.prefix != "" && strings.HasPrefix(strings.ToLower(strings.TrimSpace(q.SQL)), d.prefix) {
		d.prefix, d.armed = "", true
	}
	return ctx
}

func (d *dropper) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

type dropConn struct {
	net.Conn
	d *dropper
}

func (c *dropConn) Write(p []byte) (int, error) {
	n, err := c.Conn.Write(p)
	c.d.mu.Lock()
	drop := c.d.armed
	if drop {
		c.d.armed = false
		c.d.hits++
	}
	c.d.mu.Unlock()
	if drop {
		_ = c.Conn.Close()
	}
	return n, err
}

// TestCommitOutcomeUnknown: the COMMIT reaches PostgreSQL and commits, but
// the connection is gone before its answer arrives. The inbox cannot know
// the outcome: the delivery is requeued, never acknowledged, and its
// redelivery finds the committed key and is acknowledged as a duplicate
// without running the handler. One effect.
func TestCommitOutcomeUnknown(t *testing.T) {
	b := newPostgres(t, false)
	raw := testenv.Getenv(t, "MSGAUDIT_POSTGRES_URL", "")
	cfg, err := pgx.ParseConfig(raw)
	if err != nil {
		t.Fatal(err)
	}
	d := &dropper{}
	cfg.Tracer = d
	cfg.DialFunc = func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := (&net.Dialer{}).DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return &dropConn{Conn: c, d: d}, nil
	}
	db := stdlib.OpenDB(*cfg)
	t.Cleanup(func() { _ = db.Close() })
	ib, err := inbox.New(context.Background(), db, inbox.Options{Dialect: inbox.PostgreSQL, Table: b.table})
	if err != nil {
		t.Fatal(err)
	}
	// The server usually runs the COMMIT it received although its client
	// is gone (a moment after the client gave up). But the close can reset
	// the connection before the server read the COMMIT, which then never
	// runs: a requeue without a commit, also safe, but not the case under
	// test. Such a try is repeated with another key.
	var key string
	for try := 1; ; try++ {
		key = "u-" + randHex(6)
		d.mu.Lock()
		d.prefix, d.hits = "commit", 0
		d.mu.Unlock()
		res := process(t, newReceiver(t, ib, nil), msg(key), inbox.Handler(func(ctx context.Context, tx *sql.Tx, m *receiver.Message) error {
			return b.apply(ctx, tx, m.Key, "ok")
		}))
		d.mu.Lock()
		hits := d.hits
		d.mu.Unlock()
		if hits != 1 {
			t.Fatalf("the connection was not dropped after the COMMIT was sent (result %v %s)", res.Action, res.Reason)
		}
		if res.Action != receiver.Requeue || !errors.Is(res.Err, inbox.ErrCommit) {
			t.Fatalf("result %v (%s, %v); want a requeue with ErrCommit", res.Action, res.Reason, res.Err)
		}
		committed := false
		for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
			if committed = contains(t, ib, key); committed {
				break
			}
		}
		if committed {
			break
		}
		if n := b.applied(t, key); n != 0 {
			t.Fatalf("try %d: key not committed but the effect applied %d times", try, n)
		}
		if try == 5 {
			t.Fatal("in 5 tries the COMMIT sent before the drop never took effect on the server: the test did not reach the unknown outcome")
		}
		t.Logf("try %d: the connection was reset before the server read the COMMIT; trying again", try)
	}
	if n := b.applied(t, key); n != 1 {
		t.Fatalf("key committed but the effect applied %d times; want 1", n)
	}
	ran := false
	res := process(t, newReceiver(t, ib, nil), msg(key), inbox.Handler(func(ctx context.Context, tx *sql.Tx, m *receiver.Message) error {
		ran = true
		return b.apply(ctx, tx, m.Key, "ok")
	}))
	if res.Action != receiver.Ack || !res.Duplicate || ran {
		t.Errorf("redelivery: %v duplicate=%v ran=%v (%s); want a duplicate ack without running", res.Action, res.Duplicate, ran, res.Reason)
	}
	if n := b.applied(t, key); n != 1 {
		t.Errorf("effect applied %d times; want 1", n)
	}
}
