package natsconsumer

import (
	"errors"
	"fmt"
	"github.com/acemq/msgaudit/internal/testkit/logbuf"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/acemq/msgaudit/internal/testkit/testwait"
)

// The two halves of every secret the URL tests use, distinctive enough
// that finding either in a printout means the secret leaked.
const secretA, secretB = "Qz7k", "Wm4j"

// leaks reports whether s shows a part of the test's secret.
func leaks(s string) bool { return strings.Contains(s, secretA) || strings.Contains(s, secretB) }

// secretURLs returns URLs that hold a password or a token made of the two
// halves joined by sep, as written by the caller (raw or encoded).
func secretURLs(sep string) map[string]string {
	s := secretA + sep + secretB
	return map[string]string{
		"password":      "nats://app:" + s + "@127.0.0.1:1",
		"token":         "nats://" + s + "@127.0.0.1:1",
		"list password": "nats://app:" + s + "@127.0.0.1:1,nats://127.0.0.1:2",
		"list token":    "nats://127.0.0.1:2,nats://" + s + "@127.0.0.1:1",
	}
}

// TestURLReservedInSecretRefused: a password or token holding a raw '/',
// '?', '#', ',', '@' or '%' is refused by New (nats.go would take part of
// it for a host, a path or another server), and neither New's error nor
// any printout of the Config shows any part of it.
func TestURLReservedInSecretRefused(t *testing.T) {
	for _, sep := range []string{"/", "?", "#", ",", "@", "%"} {
		for name, u := range secretURLs(sep) {
			t.Run(fmt.Sprintf("%s %q", name, sep), func(t *testing.T) {
				cfg := validConfig()
				cfg.URL = u
				_, err := New(cfg)
				if !errors.Is(err, ErrConfig) {
					t.Errorf("New: %v; want ErrConfig", err)
				} else if leaks(err.Error()) {
					t.Errorf("New's error shows the secret: %v", err)
				}
				for _, verb := range []string{"%v", "%+v", "%#v", "%s"} {
					if s := fmt.Sprintf(verb, cfg); leaks(s) {
						t.Errorf("%s of the Config shows the secret: %s", verb, s)
					}
				}
			})
		}
	}
}

// TestURLEncodedSecretNeverShown: a password or token holding the same
// characters percent-encoded is accepted, and no printout of the Config
// or the Consumer, no log line and no error of a Run that cannot connect
// shows any part of it.
func TestURLEncodedSecretNeverShown(t *testing.T) {
	for _, sep := range []string{"%2F", "%3F", "%23", "%2C", "%40", "%25"} {
		for name, u := range secretURLs(sep) {
			t.Run(fmt.Sprintf("%s %q", name, sep), func(t *testing.T) {
				var logs logbuf.Buffer
				cfg := validConfig()
				cfg.URL = u
				cfg.ConnectRetries = 1
				cfg.ConnectTimeout = time.Second
				cfg.ReconnectBackoff.Max = 10 * time.Millisecond
				cfg.Pipeline.Logger = slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
				c, err := New(cfg)
				if err != nil {
					t.Fatalf("New: %v", err)
				}
				for _, verb := range []string{"%v", "%+v", "%#v", "%s"} {
					for _, v := range []any{cfg, c} {
						if s := fmt.Sprintf(verb, v); leaks(s) {
							t.Errorf("%s of %T shows the secret: %s", verb, v, s)
						}
					}
				}
				err = c.Run(testwait.Context(t, testwait.Long))
				if !errors.Is(err, ErrConnect) {
					t.Fatalf("Run: %v; want ErrConnect", err)
				}
				if leaks(err.Error()) {
					t.Errorf("Run's error shows the secret: %v", err)
				}
				if !strings.Contains(logs.String(), "connect failed") {
					t.Fatalf("no log line of the failed connects: %s", logs.String())
				}
				if leaks(logs.String()) {
					t.Errorf("a log line shows the secret: %s", logs.String())
				}
			})
		}
	}
}

// TestURLListRedacted: in a server list only the userinfo is masked.
func TestURLListRedacted(t *testing.T) {
	cfg := validConfig()
	cfg.URL = "nats://a:p@h1,nats://h2"
	if got, want := cfg.redactedURL(), "nats://xxxxx@h1,nats://h2"; got != want {
		t.Errorf("redacted %q; want %q", got, want)
	}
}
