package rabbitconsumer

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
	ib := testInbox(t, 4)
	mem := memStore(t, idempotency.Options{})
	base := Config{URL: "amqp://u:pw@127.0.0.1:1/", Queue: "q", Handler: nopHandler, Concurrency: 4, Pipeline: receiver.Config{Inbox: ib}}
	c, err := New(base)
	if err != nil {
		t.Fatalf("New with an Inbox: %v", err)
	}
	res := c.rcv.Process(context.Background(), &receiver.Message{Key: "k1", Destination: "q"}, nopHandler)
	if res.Action != receiver.Ack || !strings.HasPrefix(res.Trace, "memory:") || !strings.Contains(res.Trace, " inbox:") {
		t.Errorf("Process through the consumer's receiver: %+v; want an ack through memory then the inbox", res)
	}
	for _, tc := range []struct {
		name, want string
		mod        func(*Config)
	}{
		{"typed nil inbox", "nil *inbox.Inbox", func(c *Config) { c.Pipeline.Inbox = (*inbox.Inbox)(nil) }},
		{"inbox and store", "Inbox and Store", func(c *Config) { c.Pipeline.Store = mem }},
		{"inbox and DuplicateDeliver", "DuplicateDeliver", func(c *Config) { c.Pipeline.Duplicates = receiver.DuplicateDeliver }},
		{"inbox and MissingKeyProcess", "MissingKeyProcess", func(c *Config) { c.Pipeline.MissingKey = receiver.MissingKeyProcess }},
		{"pool smaller than the lanes", "allows 3 connections but the inbox has 4 lanes", func(c *Config) { c.Pipeline.Inbox = testInbox(t, 3, 4) }},
		{"more lanes than handlers", "has 5 lanes but 4 handlers can take them", func(c *Config) { c.Pipeline.Inbox = testInbox(t, 8, 5) }},
		{"one lane in a pool of one", "", func(c *Config) { c.Pipeline.Inbox = testInbox(t, 1) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := base
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
