package pgxinbox_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/acemq/msgaudit/inbox"
	"github.com/acemq/msgaudit/inbox/pgxinbox"
	"github.com/acemq/msgaudit/internal/testkit/tcpproxy"
	"github.com/acemq/msgaudit/internal/testkit/testenv"
	"github.com/acemq/msgaudit/receiver"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// cutter cuts the proxy's connections (and refuses new ones) when a
// statement starting with the armed prefix is about to be sent.
type cutter struct {
	mu     sync.Mutex
	prefix string
	hits   int
	proxy  *tcpproxy.Proxy
}

func (c *cutter) arm(prefix string) {
	c.mu.Lock()
	c.prefix = prefix
	c.mu.Unlock()
}

func (c *cutter) fired() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.hits
}

func (c *cutter) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.prefix != "" && strings.HasPrefix(strings.ToLower(strings.TrimSpace(d.SQL)), c.prefix) {
		c.prefix = ""
		c.hits++
		c.proxy.SetDown(true)
		c.proxy.Cut()
	}
	return ctx
}

func (c *cutter) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// TestFaults cuts the pool's connections through a tcpproxy just as BEGIN,
// the key's INSERT or COMMIT is sent: never an ack, nothing committed, and
// the redelivery once the server is reachable again applies the message
// once.
func TestFaults(t *testing.T) {
	f := newFixture(t, 0) // the tables, on a direct pool
	raw := testenv.Getenv(t, "MSGAUDIT_POSTGRES_URL", "the pgxinbox tests need a PostgreSQL server")
	cfg, err := pgxpool.ParseConfig(raw)
	if err != nil {
		t.Fatal(err)
	}
	px, err := tcpproxy.New(fmt.Sprintf("%s:%d", cfg.ConnConfig.Host, cfg.ConnConfig.Port), tcpproxy.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(px.Close)
	host, port, _ := strings.Cut(px.Addr(), ":")
	cfg.ConnConfig.Host = host
	fmt.Sscan(port, &cfg.ConnConfig.Port)
	cfg.ConnConfig.ConnectTimeout = 5 * time.Second
	cut := &cutter{proxy: px}
	cfg.ConnConfig.Tracer = cut
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	ib, err := pgxinbox.New(context.Background(), pool, inbox.Options{Table: f.table})
	if err != nil {
		t.Fatal(err)
	}
	r, err := receiver.New(receiver.Config{Selectors: []receiver.Selector{ib}, MaxAttempts: 1000})
	if err != nil {
		t.Fatal(err)
	}
	h := pgxinbox.Handler(func(ctx context.Context, tx pgx.Tx, m *receiver.Message) error { return f.apply(ctx, tx, m.Key, "ok") })
	for _, at := range []string{"begin", "insert into", "commit"} {
		t.Run("cut at "+at, func(t *testing.T) {
			key := "f-" + randHex(6)
			before := cut.fired()
			cut.arm(at)
			res := process(r, key, h)
			cut.arm("")
			px.SetDown(false)
			if cut.fired() != before+1 {
				t.Fatalf("the cut at %q never happened (result %v %s)", at, res.Action, res.Reason)
			}
			if res.Action != receiver.Requeue {
				t.Fatalf("result %v (%s, %v) despite the cut; want requeue", res.Action, res.Reason, res.Err)
			}
			if f.recorded(t, key) || f.applied(t, key) != 0 {
				t.Errorf("after the failed delivery: recorded %v, applied %d; want neither", f.recorded(t, key), f.applied(t, key))
			}
			if res := process(r, key, h); res.Action != receiver.Ack || f.applied(t, key) != 1 {
				t.Errorf("redelivery: %v (%s, %v), applied %d; want an ack and 1", res.Action, res.Reason, res.Err, f.applied(t, key))
			}
		})
	}
}
