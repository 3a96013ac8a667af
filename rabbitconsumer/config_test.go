package rabbitconsumer

import (
	"context"
	"errors"
	"fmt"
	"github.com/acemq/msgaudit/idempotency"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/acemq/msgaudit/receiver"
)

func nopHandler(context.Context, *receiver.Message) error { return nil }

func TestConfigDefaults(t *testing.T) {
	t.Parallel()
	c, err := Config{URL: "amqp://guest:guest@127.0.0.1/", Queue: "orders", Handler: nopHandler, Pipeline: receiver.Config{MemoryOnly: true}}.withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	for name, got := range map[string][2]any{
		"Prefetch":             {c.Prefetch, defaultPrefetch},
		"Concurrency":          {c.Concurrency, defaultConcurrency},
		"ConnectRetries":       {c.ConnectRetries, 0},
		"ConnectTimeout":       {c.ConnectTimeout, defaultConnectTimeout},
		"Heartbeat":            {c.Heartbeat, defaultHeartbeat},
		"FrameSize":            {c.FrameSize, defaultFrameSize},
		"MaxBodyBytes":         {c.MaxBodyBytes, defaultMaxBodyBytes},
		"ShutdownTimeout":      {c.ShutdownTimeout, defaultShutdownTimeout},
		"Pipeline.Backoff":     {c.Pipeline.Backoff, receiver.Backoff{Initial: 100 * time.Millisecond, Max: defaultMaxRequeueDelay, Jitter: 1}},
		"DeadLetterQueue":      {c.DeadLetterQueue, "orders.dlq"},
		"DeadLetterRoutingKey": {c.DeadLetterRoutingKey, "orders.dlq"},
		"ReconnectBackoff":     {c.ReconnectBackoff, receiver.Backoff{Initial: 100 * time.Millisecond, Max: 10 * time.Second, Jitter: 1}},
	} {
		if got[0] != got[1] {
			t.Errorf("%s = %v; want %v", name, got[0], got[1])
		}
	}
	c, err = Config{URL: "amqp://h/", Queue: "orders", Handler: nopHandler, DeadLetterExchange: "dlx", Pipeline: receiver.Config{MemoryOnly: true}}.withDefaults()
	if err != nil || c.DeadLetterRoutingKey != "orders" || c.DeadLetterQueue != "" {
		t.Errorf("with an exchange: routing key %q queue %q err %v; want orders, none", c.DeadLetterRoutingKey, c.DeadLetterQueue, err)
	}
}

func TestConfigErrors(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	notPEM := filepath.Join(dir, "x.pem")
	os.WriteFile(notPEM, []byte("not a certificate"), 0o600)
	base := Config{URL: "amqps://u:pw@h/", Queue: "q", Handler: nopHandler, Pipeline: receiver.Config{MemoryOnly: true}}
	for _, tc := range []struct {
		name string
		mod  func(*Config)
	}{
		{"no URL", func(c *Config) { c.URL = "" }},
		{"bad scheme", func(c *Config) { c.URL = "http://h/" }},
		{"no queue", func(c *Config) { c.Queue = "" }},
		{"no handler", func(c *Config) { c.Handler = nil }},
		{"TLS on amqp://", func(c *Config) { c.URL = "amqp://h/"; c.CAFile = notPEM }},
		{"prefetch too big", func(c *Config) { c.Prefetch = 70000 }},
		{"frame too small", func(c *Config) { c.FrameSize = 1000 }},
		{"dead letters into the queue", func(c *Config) { c.DeadLetterQueue = "q" }},
		{"CA file missing", func(c *Config) { c.CAFile = filepath.Join(dir, "missing.pem") }},
		{"CA file not PEM", func(c *Config) { c.CAFile = notPEM }},
		{"cert without key", func(c *Config) { c.CertFile = notPEM }},
		{"bad key pair", func(c *Config) { c.CertFile, c.KeyFile = notPEM, notPEM }},
	} {
		cfg := base
		tc.mod(&cfg)
		_, err := New(cfg)
		if !errors.Is(err, ErrConfig) {
			t.Errorf("%s: New = %v; want ErrConfig", tc.name, err)
		} else if strings.Contains(err.Error(), "pw@") {
			t.Errorf("%s: error reveals the password: %v", tc.name, err)
		}
	}
}

// TestConfigRedacted: no verb prints the password of URL, nor anything of
// the pipeline's store.
func TestConfigRedacted(t *testing.T) {
	t.Parallel()
	c := Config{URL: "amqps://app:Sup3r-s3cret@rabbit:5671/prod",
		Pipeline: receiver.Config{Store: secretStore{memStore(t, idempotency.Options{}), "rediss://:R3dis-pw@cache:6380/0"}},
		Queue:    "orders", Handler: nopHandler, CAFile: "/etc/ca.pem"}
	for _, s := range []string{
		c.String(), fmt.Sprint(c), fmt.Sprintf("%v", &c), fmt.Sprintf("%+v", c), fmt.Sprintf("%#v", c),
		fmt.Sprintf("%s", c), fmt.Sprintf("%q", c), fmt.Sprintf("%d", c),
	} {
		if strings.Contains(s, "Sup3r-s3cret") || strings.Contains(s, "R3dis-pw") {
			t.Errorf("password printed: %s", s)
		}
		if !strings.Contains(s, "amqps://app:xxxxx@rabbit:5671/prod") || !strings.Contains(s, `Queue:\"orders\"`) && !strings.Contains(s, `Queue:"orders"`) {
			t.Errorf("redacted form lost the useful parts: %s", s)
		}
	}
}

func TestRedactor(t *testing.T) {
	t.Parallel()
	r := newRedactor("amqp://u:p%40ss@h/", "redis://:rpw@h/0?password=qpw", "::not a url u:np@x")
	for in, want := range map[string]string{
		"login p@ss failed":   "login xxxxx failed",
		"url p%40ss":          "url xxxxx",
		"redis rpw and qpw":   "redis xxxxx and xxxxx",
		"nothing secret here": "nothing secret here",
	} {
		if got := r.String(in); got != want {
			t.Errorf("redact(%q) = %q; want %q", in, got, want)
		}
	}
	base := errors.New("dial p@ss")
	err := r.Error(base)
	if err.Error() != "dial xxxxx" || !errors.Is(err, base) {
		t.Errorf("Error = %v (chain kept: %v)", err, errors.Is(err, base))
	}
}

func TestBackoff(t *testing.T) {
	t.Parallel()
	b := receiver.Backoff{Initial: 10 * time.Millisecond, Max: 80 * time.Millisecond}
	for n, ceil := range []time.Duration{10, 20, 40, 80, 80, 80} {
		ceil *= time.Millisecond
		for range 50 {
			if d := b.Delay(n); d <= 0 || d > ceil {
				t.Fatalf("delay(%d) = %v; want in (0, %v]", n, d, ceil)
			}
		}
	}
}

// secretStore is a store holding a secret in a field, as a store opened
// from a URL may.
type secretStore struct {
	idempotency.Store
	url string
}
