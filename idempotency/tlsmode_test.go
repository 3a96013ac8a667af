package idempotency_test

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"testing"

	"github.com/acemq/msgaudit/idempotency"
	"github.com/acemq/msgaudit/internal/redact"
)

// TestOpenLogsTLS: opening a store by URL logs the effective PostgreSQL
// TLS mode once, as a warning unless the server is verified, and warns
// about rediss://…?skip_verify=true (and its Cluster and Sentinel forms). The servers are not reachable: the
// log comes before the first connection.
func TestOpenLogsTLS(t *testing.T) {
	t.Setenv("PGSSLMODE", "")
	for _, c := range []struct{ url, want, level string }{
		{"postgres://u:pw@127.0.0.1:1/x?connect_timeout=1", "sslmode=prefer", "WARN"},
		{"postgres://u:pw@127.0.0.1:1/x?connect_timeout=1&sslmode=verify-full&sslrootcert=system", "sslmode=verify-full", "INFO"},
		{"rediss://u:pw@127.0.0.1:1/0?skip_verify=true&max_retries=-1", "skip_verify", "WARN"},
		{"rediss+cluster://u:pw@127.0.0.1:1,127.0.0.1:2?skip_verify=true&max_retries=-1", "skip_verify", "WARN"},
		{"rediss+sentinel://u:pw@127.0.0.1:1/m?skip_verify=true&max_retries=-1", "skip_verify", "WARN"},
	} {
		var buf bytes.Buffer
		log := slog.New(slog.NewTextHandler(&buf, nil))
		ctx, cancel := context.WithTimeout(context.Background(), 300e6)
		s, err := idempotency.Open(ctx, c.url, idempotency.Options{Logger: log})
		cancel()
		if err == nil {
			_ = s.Close()
			t.Fatalf("%s opened", redact.URL(c.url))
		}
		lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
		if len(lines) != 1 || !strings.Contains(lines[0], c.want) || !strings.Contains(lines[0], "level="+c.level) {
			t.Errorf("%s: logged %q, want one %s line with %q", redact.URL(c.url), buf.String(), c.level, c.want)
		}
		if strings.Contains(buf.String(), ":pw@") {
			t.Errorf("password logged: %s", buf.String())
		}
	}
}
