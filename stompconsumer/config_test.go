package stompconsumer

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/acemq/msgaudit/internal/redact"
	"github.com/acemq/msgaudit/receiver"
	"pgregory.net/rapid"
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
		{"no addresses", Config{MemoryOnly: true, Subscriptions: []Subscription{{Destination: "/queue/a", Handler: h}}}},
		{"no subscriptions", Config{MemoryOnly: true, Addresses: []string{"h:1"}}},
		{"bad address", Config{MemoryOnly: true, Addresses: []string{"http://h"}, Subscriptions: []Subscription{{Destination: "/queue/a", Handler: h}}}},
		{"bare destination", Config{MemoryOnly: true, Addresses: []string{"h:1"}, Subscriptions: []Subscription{{Destination: "a", Handler: h}}}},
		{"nil handler", Config{MemoryOnly: true, Addresses: []string{"h:1"}, Subscriptions: []Subscription{{Destination: "/queue/a"}}}},
		{"same name twice", Config{MemoryOnly: true, Addresses: []string{"h:1"}, Subscriptions: []Subscription{
			{Destination: "/topic/a", Handler: h}, {Destination: "/topic/a", Handler: h}}}},
		{"missing CA file", Config{MemoryOnly: true, Addresses: []string{"h:1"}, CAFile: "/nonexistent/ca.pem",
			Subscriptions: []Subscription{{Destination: "/queue/a", Handler: h}}}},
		{"cert without key", Config{MemoryOnly: true, Addresses: []string{"h:1"}, CertFile: "/c.pem",
			Subscriptions: []Subscription{{Destination: "/queue/a", Handler: h}}}},
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
	c, err := New(Config{MemoryOnly: true, Addresses: []string{"h"}, Subscriptions: []Subscription{{Destination: "/queue/a",
		Handler: func(context.Context, *receiver.Message) error { return nil }}}})
	if err != nil {
		t.Fatal(err)
	}
	cfg := c.cfg
	if cfg.Prefetch != DefaultPrefetch || cfg.Concurrency != 1 || cfg.ConnectRetries != DefaultConnectRetries ||
		cfg.HeartBeat != DefaultHeartBeat || cfg.MaxHeaderBytes != DefaultMaxHeaderBytes || cfg.MaxBodyBytes != DefaultMaxBodyBytes ||
		cfg.DeadLetterDestination != DefaultDeadLetter || cfg.KeyHeader != "message-id" {
		t.Errorf("defaults not applied: %v", cfg)
	}
	if s := c.subs[0]; s.Name != "/queue/a" || s.Prefetch != DefaultPrefetch || s.Concurrency != 1 {
		t.Errorf("subscription defaults not applied: %+v", s)
	}
}

// TestBackoff checks the delay bounds: attempt n waits within
// [base·(1-Jitter), base], base = min(Initial·2ⁿ, Max).
func TestBackoff(t *testing.T) {
	t.Parallel()
	rapid.Check(t, func(t *rapid.T) {
		b := Backoff{
			Initial: time.Duration(rapid.Int64Range(1, int64(time.Second)).Draw(t, "initial")),
			Max:     time.Duration(rapid.Int64Range(1, int64(time.Minute)).Draw(t, "max")),
			Jitter:  rapid.Float64Range(0, 1).Draw(t, "jitter"),
		}.withDefaults(time.Millisecond, time.Second, 0.5)
		n := rapid.IntRange(0, 200).Draw(t, "n")
		want := b.Initial
		for range n {
			if want >= b.Max {
				break
			}
			want *= 2
		}
		want = min(want, b.Max)
		if got := b.base(n); got != want {
			t.Fatalf("base(%d) = %v, want %v (%+v)", n, got, want, b)
		}
		d := b.Delay(n)
		lo := time.Duration(float64(want) * (1 - b.Jitter))
		if d > want || d < lo-1 {
			t.Fatalf("Delay(%d) = %v outside [%v, %v]", n, d, lo, want)
		}
	})
}
