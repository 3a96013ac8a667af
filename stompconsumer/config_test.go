package stompconsumer

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"

	"github.com/acemq/msgaudit/internal/redact"
	"github.com/acemq/msgaudit/receiver"
)

func TestParseAddress(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in       string
		hostport string
		tls      bool
		explicit bool
		login    string
		pass     string
		err      bool
	}{
		{in: "127.0.0.1:61613", hostport: "127.0.0.1:61613"},
		{in: "broker", hostport: "broker:61613"},
		{in: "tcp://h:1", hostport: "h:1", explicit: true},
		{in: "stomp://h:2", hostport: "h:2", explicit: true},
		{in: "ssl://h:3", hostport: "h:3", tls: true, explicit: true},
		{in: "stomp+ssl://h:4", hostport: "h:4", tls: true, explicit: true},
		{in: "STOMP+SSL://h", hostport: "h:61612", tls: true, explicit: true},
		{in: "tls://h", hostport: "h:61612", tls: true, explicit: true},
		{in: "tcp://u:p%40ss@h:5", hostport: "h:5", explicit: true, login: "u", pass: "p@ss"},
		{in: "tcp://[::1]:6", hostport: "[::1]:6", explicit: true},
		{in: "[::1]", hostport: "[::1]:61613"},
		{in: " tcp://h:7 ", hostport: "h:7", explicit: true},
		{in: "", err: true},
		{in: "http://h:1", err: true},
		{in: "tcp://h:1/path", err: true},
		{in: "tcp://", err: true},
		{in: "tcp://u:secret@", err: true},
		{in: "tcp://u:secret@h:1/x", err: true},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			ep, err := parseAddress(tt.in)
			if tt.err {
				if err == nil {
					t.Fatalf("parseAddress(%q) = %+v, want an error", tt.in, ep)
				}
				if !errors.Is(err, ErrConfig) {
					t.Errorf("error %v does not wrap ErrConfig", err)
				}
				if strings.Contains(err.Error(), "secret") {
					t.Errorf("error leaks the password: %v", err)
				}
				return
			}
			if err != nil {
				t.Fatalf("parseAddress(%q): %v", tt.in, err)
			}
			if ep.hostport != tt.hostport || ep.tls != tt.tls || ep.explicit != tt.explicit || ep.login != tt.login || ep.passcode != tt.pass {
				t.Errorf("parseAddress(%q) = %+v, want hostport=%s tls=%v explicit=%v login=%q pass=%q",
					tt.in, ep, tt.hostport, tt.tls, tt.explicit, tt.login, tt.pass)
			}
			if strings.Contains(ep.String(), "@") {
				t.Errorf("String() %q shows user info", ep.String())
			}
		})
	}
}

func TestRedactURL(t *testing.T) {
	t.Parallel()
	tests := []struct{ in, want string }{
		{"tcp://u:secret@h:1", "tcp://u:xxxxx@h:1"},
		{"tcp://u@h:1", "tcp://u@h:1"},
		{"tcp://h:1", "tcp://h:1"},
		{"h:1", "h:1"},
		{"tcp://u:sec@ret@h:1", "tcp://u:xxxxx@h:1"},
	}
	for _, tt := range tests {
		if got := redact.Strict(tt.in); got != tt.want {
			t.Errorf("redact.Strict(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

// TestConfigRedacted prints a Config every way fmt allows and checks that
// neither the passcode nor a URL password appears.
func TestConfigRedacted(t *testing.T) {
	t.Parallel()
	const secret, urlSecret = "s3cr3t-Passc0de", "url-Pa55word"
	cfg := Config{
		Addresses: []string{"tcp://admin:" + urlSecret + "@127.0.0.1:61613", "ssl://h:61612"},
		Login:     "admin", Passcode: secret, CAFile: "/ca.pem",
		Subscriptions: []Subscription{{Destination: "/queue/a"}},
	}
	for _, verb := range []string{"%v", "%+v", "%#v", "%s", "%q"} {
		for _, v := range []any{cfg, &cfg} {
			out := fmt.Sprintf(verb, v)
			if strings.Contains(out, secret) || strings.Contains(out, urlSecret) {
				t.Errorf("fmt %s leaks a secret: %s", verb, out)
			}
			if !strings.Contains(out, "admin") || !strings.Contains(out, "/queue/a") {
				t.Errorf("fmt %s lost the non-secret fields: %s", verb, out)
			}
		}
	}
	if s := cfg.String(); !strings.Contains(s, "Passcode:xxxxx") {
		t.Errorf("String() = %s, want Passcode:xxxxx", s)
	}
	var empty Config
	if s := empty.String(); !strings.Contains(s, `Passcode:""`) {
		t.Errorf("empty String() = %s", s)
	}
}

// TestRedactingHandler checks the log redaction on every kind of value.
func TestRedactingHandler(t *testing.T) {
	t.Parallel()
	const secret = "hunter2-long"
	var buf bytes.Buffer
	red := redact.New(secret)
	l := slog.New(redact.NewHandler(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}), red))
	l = l.With("with", "w-"+secret)
	l.Info("msg "+secret, "s", secret, "err", errors.New("e "+secret), "any", []string{secret},
		slog.Group("g", "inner", secret), "n", 42)
	l.WithGroup("grp").Warn("x", "k", secret)
	out := buf.String()
	if strings.Contains(out, secret) {
		t.Fatalf("log output leaks the secret:\n%s", out)
	}
	for _, want := range []string{"n=42", "msg xxxxx", "with=w-xxxxx", "grp.k=xxxxx"} {
		if !strings.Contains(out, want) {
			t.Errorf("log output lacks %q:\n%s", want, out)
		}
	}
	// A redacted error still unwraps.
	err := red.Error(fmt.Errorf("%w: passcode %s", ErrRejected, secret))
	if !errors.Is(err, ErrRejected) || strings.Contains(err.Error(), secret) {
		t.Errorf("red.Error = %v (Is ErrRejected %v)", err, errors.Is(err, ErrRejected))
	}
	if red.Error(nil) != nil {
		t.Error("red.Error(nil) != nil")
	}
}

func TestNewConfigErrors(t *testing.T) {
	t.Parallel()
	h := func(context.Context, *receiver.Message) error { return nil }
	tests := []struct {
		name string
		cfg  Config
	}{
		{"no addresses", Config{Subscriptions: []Subscription{{Destination: "/queue/a", Handler: h}}, Pipeline: receiver.Config{MemoryOnly: true}}},
		{"no subscriptions", Config{Addresses: []string{"h:1"}, Pipeline: receiver.Config{MemoryOnly: true}}},
		{"bad address", Config{Addresses: []string{"http://h"}, Subscriptions: []Subscription{{Destination: "/queue/a", Handler: h}}, Pipeline: receiver.Config{MemoryOnly: true}}},
		{"bare destination", Config{Addresses: []string{"h:1"}, Subscriptions: []Subscription{{Destination: "a", Handler: h}}, Pipeline: receiver.Config{MemoryOnly: true}}},
		{"nil handler", Config{Addresses: []string{"h:1"}, Subscriptions: []Subscription{{Destination: "/queue/a"}}, Pipeline: receiver.Config{MemoryOnly: true}}},
		{"same name twice", Config{
			Addresses: []string{"h:1"},
			Subscriptions: []Subscription{
				{Destination: "/topic/a", Handler: h}, {Destination: "/topic/a", Handler: h}},
			Pipeline: receiver.Config{MemoryOnly: true}}},
		{"missing CA file", Config{
			Addresses:     []string{"h:1"},
			CAFile:        "/nonexistent/ca.pem",
			Subscriptions: []Subscription{{Destination: "/queue/a", Handler: h}},
			Pipeline:      receiver.Config{MemoryOnly: true}}},
		{"cert without key", Config{
			Addresses:     []string{"h:1"},
			CertFile:      "/c.pem",
			Subscriptions: []Subscription{{Destination: "/queue/a", Handler: h}},
			Pipeline:      receiver.Config{MemoryOnly: true}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := New(tt.cfg); !errors.Is(err, ErrConfig) {
				t.Errorf("New: %v, want ErrConfig", err)
			}
		})
	}
}

func TestNewDefaults(t *testing.T) {
	t.Parallel()
	c, err := New(Config{
		Addresses: []string{"h"},
		Subscriptions: []Subscription{{Destination: "/queue/a",
			Handler: func(context.Context, *receiver.Message) error { return nil }}},
		Pipeline: receiver.Config{MemoryOnly: true}})
	if err != nil {
		t.Fatal(err)
	}
	cfg := c.cfg
	if cfg.Prefetch != defaultPrefetch || cfg.Concurrency != 1 || cfg.ConnectRetries != 0 ||
		cfg.Heartbeat != defaultHeartbeat || cfg.MaxHeaderBytes != defaultMaxHeaderBytes || cfg.MaxBodyBytes != defaultMaxBodyBytes ||
		cfg.DeadLetterDestination != defaultDeadLetter || cfg.KeyHeader != "message-id" {
		t.Errorf("defaults not applied: %v", cfg)
	}
	if s := c.subs[0]; s.Name != "/queue/a" || s.Prefetch != defaultPrefetch || s.Concurrency != 1 {
		t.Errorf("subscription defaults not applied: %+v", s)
	}
}

// TestCarriedKey: a retry copy gets a new message-id from the broker, but
// it carries the original's key, and that is the key it is audited under.
func TestCarriedKey(t *testing.T) {
	t.Parallel()
	key := carriedKey(receiver.HeaderKey("message-id"))
	first := &receiver.Message{Headers: map[string]string{"message-id": "ID:vm-1-17-3:3:-1:1:7"}}
	retry := &receiver.Message{Headers: map[string]string{"message-id": "ID:vm-1-17-3:9:-1:1:2",
		"x-original-key": "ID:vm-1-17-3:3:-1:1:7"}}
	k1, _ := key(first)
	k2, _ := key(retry)
	if k1 != "ID:vm-1-17-3:3:-1:1:7" || k2 != k1 {
		t.Fatalf("keys %q and %q, want the original's for both", k1, k2)
	}
}
