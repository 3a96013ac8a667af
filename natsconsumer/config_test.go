package natsconsumer

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/acemq/msgaudit/receiver"
)

func validConfig() Config {
	return Config{URL: "nats://127.0.0.1:4222", Stream: "ORDERS", Consumer: "billing", DeadLetterSubject: "dlq.orders",
		Handler:  func(context.Context, *receiver.Message) error { return nil },
		Pipeline: receiver.Config{MemoryOnly: true}}
}

// TestConfigErrors: every invalid configuration is an error wrapping
// ErrConfig from New, naming what is wrong.
func TestConfigErrors(t *testing.T) {
	for _, tc := range []struct {
		name, want string
		edit       func(*Config)
	}{
		{"no URL", "no URL", func(c *Config) { c.URL = "" }},
		{"scheme", "scheme", func(c *Config) { c.URL = "amqp://127.0.0.1:5672" }},
		{"bad URL in a list", "cannot be parsed", func(c *Config) { c.URL = "nats://127.0.0.1:4222,nats://" }},
		{"port", "cannot be parsed", func(c *Config) { c.URL = "nats://127.0.0.1:42x" }},
		{"no stream", "no Stream", func(c *Config) { c.Stream = "" }},
		{"stream name", "stream name", func(c *Config) { c.Stream = "a.b" }},
		{"no consumer", "no Consumer", func(c *Config) { c.Consumer = "" }},
		{"consumer name", "durable name", func(c *Config) { c.Consumer = "a b" }},
		{"no handler", "nil Handler", func(c *Config) { c.Handler = nil }},
		{"no dead-letter subject", "no DeadLetterSubject", func(c *Config) { c.DeadLetterSubject = "" }},
		{"wildcard dead-letter subject", "not a subject", func(c *Config) { c.DeadLetterSubject = "dlq.*" }},
		{"dead letters read back", "come back", func(c *Config) { c.FilterSubjects = []string{"dlq.>"} }},
		{"bad filter", "not a subject", func(c *Config) { c.FilterSubjects = []string{"orders..x"} }},
		{"in-flight", "below Concurrency", func(c *Config) { c.Concurrency, c.InFlight = 4, 2 }},
		{"negative in-flight", "negative InFlight", func(c *Config) { c.InFlight = -1 }},
		{"ack wait", "AckWait", func(c *Config) { c.AckWait = 10 * time.Millisecond }},
		{"no durability", "Pipeline", func(c *Config) { c.Pipeline.MemoryOnly = false }},
		{"TLS files", "CAFile", func(c *Config) { c.CAFile = "/nonexistent/ca.pem" }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := validConfig()
			tc.edit(&cfg)
			_, err := New(cfg)
			if !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("New: %v; want ErrConfig mentioning %q", err, tc.want)
			}
		})
	}
	if _, err := New(validConfig()); err != nil {
		t.Fatalf("valid config: %v", err)
	}
	cfg := validConfig()
	cfg.URL = "nats://a.example:4222, tls://b.example:4222"
	cfg.FilterSubjects = []string{"orders.*", "refunds.>"}
	if _, err := New(cfg); err != nil {
		t.Fatalf("a server list and wildcard filters: %v", err)
	}
}

// TestConfigRedacted: the password and token of every server URL are
// absent from every rendering of a Config and of a Consumer.
func TestConfigRedacted(t *testing.T) {
	cfg := validConfig()
	cfg.URL = "nats://app:s3cretpw@a.example:4222,nats://tok3nvalue@b.example:4222"
	c, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	for _, verb := range []string{"%v", "%+v", "%#v", "%s"} {
		for _, v := range []any{cfg, c} {
			if s := fmt.Sprintf(verb, v); strings.Contains(s, "s3cretpw") || strings.Contains(s, "tok3nvalue") {
				t.Errorf("%s of %T shows a secret: %s", verb, v, s)
			}
		}
	}
}

// TestSubjectMatches pins the filter matching New uses to refuse a
// dead-letter subject the consumer would read.
func TestSubjectMatches(t *testing.T) {
	for _, tc := range []struct {
		f, s string
		want bool
	}{
		{"a.b", "a.b", true}, {"a.*", "a.b", true}, {"a.>", "a.b.c", true}, {">", "a", true},
		{"a.*", "a.b.c", false}, {"a.>", "a", false}, {"a.b", "a.c", false}, {"*.b", "a.b", true},
	} {
		if got := subjectMatches(tc.f, tc.s); got != tc.want {
			t.Errorf("subjectMatches(%q, %q) = %v; want %v", tc.f, tc.s, got, tc.want)
		}
	}
}

// TestNoStream: Run reports a missing stream, and a dead-letter subject
// no stream captures, at once with ErrNoStream instead of retrying.
func TestNoStream(t *testing.T) {
	e := newEnv(t, 0)
	for _, edit := range []func(*Config){
		func(c *Config) { c.Stream = "msgaudit_missing_" + randomName(t) },
		func(c *Config) { c.DeadLetterSubject = "msgaudit-missing-" + randomName(t) },
	} {
		cfg := e.config(e.url, func(context.Context, *receiver.Message) error { return nil })
		cfg.Pipeline.MemoryOnly = true
		edit(&cfg)
		c := newConsumer(t, cfg)
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		err := c.Run(ctx)
		cancel()
		if !errors.Is(err, ErrNoStream) {
			t.Errorf("Run: %v; want ErrNoStream", err)
		}
	}
}

// TestConsumerRefused: a filter outside the stream's subjects is refused
// by the server when Run creates the consumer: Run returns ErrConfig at
// once instead of retrying.
func TestConsumerRefused(t *testing.T) {
	e := newEnv(t, 0)
	cfg := e.config(e.url, func(context.Context, *receiver.Message) error { return nil })
	cfg.Pipeline.MemoryOnly = true
	cfg.FilterSubjects = []string{"msgaudit-elsewhere-" + randomName(t)}
	c := newConsumer(t, cfg)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := c.Run(ctx); !errors.Is(err, ErrConfig) {
		t.Fatalf("Run: %v; want ErrConfig", err)
	}
}

// TestConnectRetries: with ConnectRetries set, Run gives up on a port
// nobody listens on with ErrConnect after that many retries.
func TestConnectRetries(t *testing.T) {
	e := newEnv(t, 0)
	px := e.newProxy()
	px.SetDown(true)
	cfg := e.config("nats://"+px.Addr(), func(context.Context, *receiver.Message) error { return nil })
	cfg.Pipeline.MemoryOnly = true
	cfg.ConnectRetries = 2
	cfg.ConnectTimeout = 2 * time.Second
	cfg.ReconnectBackoff = receiver.Backoff{Initial: time.Millisecond, Max: 5 * time.Millisecond}
	c := newConsumer(t, cfg)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := c.Run(ctx); !errors.Is(err, ErrConnect) {
		t.Fatalf("Run: %v; want ErrConnect", err)
	}
	if s := c.Stats(); s.ConnectErrors != 3 {
		t.Errorf("%d connect errors; want 3 (one attempt and two retries)", s.ConnectErrors)
	}
}
