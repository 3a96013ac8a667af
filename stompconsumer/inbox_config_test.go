package stompconsumer

import (
	"context"
	"database/sql"
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/acemq/msgaudit/idempotency"
	"github.com/acemq/msgaudit/inbox"
	"github.com/acemq/msgaudit/receiver"
	_ "modernc.org/sqlite"
)

// testInbox returns an SQLite inbox in a temp dir whose pool allows conns
// connections, with lanes lanes (0: the default, one).
func testInbox(t *testing.T, conns int, lanes ...int) *inbox.Inbox {
	t.Helper()
	db, err := sql.Open("sqlite", "file:"+filepath.Join(t.TempDir(), "inbox.db")+"?_txlock=immediate&_pragma=busy_timeout(5000)")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	db.SetMaxOpenConns(conns)
	o := inbox.Options{Dialect: inbox.SQLite}
	if len(lanes) > 0 {
		o.Lanes = lanes[0]
	}
	ib, err := inbox.New(context.Background(), db, o)
	if err != nil {
		t.Fatal(err)
	}
	return ib
}

// TestConfigInbox: an Inbox is one line of Config and becomes the
// receiver's durable tier; configurations that would defeat it fail at New.
func TestConfigInbox(t *testing.T) {
	h := func(context.Context, *receiver.Message) error { return nil }
	base := func(ib receiver.Inbox) Config {
		return Config{
			Addresses:     []string{"127.0.0.1:1"},
			Concurrency:   2,
			Subscriptions: []Subscription{{Destination: "/queue/a", Handler: h}, {Destination: "/queue/b", Handler: h}},
			Pipeline:      receiver.Config{Inbox: ib}}
	}
	ib := testInbox(t, 4)
	mem := memStore(t, idempotency.Options{})
	c, err := New(base(ib))
	if err != nil {
		t.Fatalf("New with an Inbox: %v", err)
	}
	res := c.rcv.Process(context.Background(), &receiver.Message{Key: "k1", Destination: "/queue/a", Consumer: "/queue/a"}, h)
	if res.Action != receiver.Ack || !strings.HasPrefix(res.Trace, "memory:") || !strings.Contains(res.Trace, " inbox:") {
		t.Errorf("Process through the consumer's receiver: %+v; want an ack through memory then the inbox", res)
	}
	for _, tc := range []struct {
		name, want string
		mod        func(*Config)
	}{
		{"typed nil inbox", "nil *inbox.Inbox", func(c *Config) { c.Pipeline.Inbox = (*inbox.Inbox)(nil) }},
		{"inbox and store", "Inbox and Store both set", func(c *Config) { c.Pipeline.Store = mem }},
		{"inbox and DuplicateDeliver", "DuplicateDeliver", func(c *Config) { c.Pipeline.Duplicates = receiver.DuplicateDeliver }},
		{"inbox and MissingKeyProcess", "MissingKeyProcess", func(c *Config) { c.Pipeline.MissingKey = receiver.MissingKeyProcess }},
		// Each subscription claims ahead (InFlight 50 > Concurrency 2), so
		// one subscription's Concurrency bounds the lanes.
		{"pool smaller than the lanes", "allows 1 connections but the inbox has 2 lanes", func(c *Config) { c.Pipeline.Inbox = testInbox(t, 1, 2) }},
		{"more lanes than one subscription's handlers", "has 3 lanes but 2 handlers", func(c *Config) { c.Pipeline.Inbox = testInbox(t, 8, 3) }},
		// Without claiming ahead every handler of both may take a lane.
		{"no claiming ahead: a lane per handler", "", func(c *Config) { c.InFlight = 2; c.Pipeline.Inbox = testInbox(t, 4, 4) }},
		{"no claiming ahead: more lanes than handlers", "has 5 lanes but 4 handlers", func(c *Config) { c.InFlight = 2; c.Pipeline.Inbox = testInbox(t, 8, 5) }},
		{"pool smaller than the lanes, no claiming ahead", "allows 3 connections but the inbox has 4 lanes", func(c *Config) { c.InFlight = 2; c.Pipeline.Inbox = testInbox(t, 3, 4) }},
		{"one lane in a pool of one", "", func(c *Config) { c.Pipeline.Inbox = testInbox(t, 1) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := base(ib)
			tc.mod(&cfg)
			_, err := New(cfg)
			if tc.want == "" {
				if err != nil {
					t.Errorf("New = %v; want it accepted", err)
				}
				return
			}
			if !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("New = %v; want ErrConfig saying %q", err, tc.want)
			}
		})
	}
}
