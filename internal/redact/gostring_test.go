package redact_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"

	"github.com/acemq/msgaudit/idempotency/redisstore"
	"github.com/acemq/msgaudit/internal/redact"
)

// verbs are the fmt verbs a secret must not escape through.
var verbs = []string{"%v", "%+v", "%#v", "%s", "%q"}

// printed returns v printed with every verb of verbs.
func printed(v any) []string {
	out := make([]string, len(verbs))
	for i, f := range verbs {
		out[i] = f + ": " + fmt.Sprintf(f, v)
	}
	return out
}

// checkNoSecret fails t if any of outs holds secret (raw or as Go quotes it).
func checkNoSecret(t *testing.T, secret string, outs []string) {
	t.Helper()
	for _, o := range outs {
		if strings.Contains(o, secret) || strings.Contains(o, strings.Trim(fmt.Sprintf("%q", secret), `"`)) {
			t.Errorf("%q in %s", secret, o)
		}
	}
}

// TestFormatHidesSecrets: no fmt verb prints a secret held by a Redactor
// (also as another type's unexported field), a redacting error (alone,
// wrapped by fmt.Errorf or joined) or a Handler; each prints its clean
// text.
func TestFormatHidesSecrets(t *testing.T) {
	const secret = "JQVW\"ZZ%KX"
	r := redact.New(secret)
	raw := fmt.Errorf("login %s refused: %w", secret, errors.New("inner "+secret))
	err := r.Error(raw)
	if err == raw {
		t.Fatal("Error did not wrap an error holding the secret")
	}
	const clean = "login xxxxx refused: inner xxxxx"
	for i, o := range printed(err) {
		want := clean
		if verbs[i] == "%q" {
			want = fmt.Sprintf("%q", clean)
		}
		if verbs[i] != "%#v" && !strings.HasSuffix(o, ": "+want) {
			t.Errorf("%s, want %q", o, want)
		}
		if !strings.Contains(o, "xxxxx") {
			t.Errorf("%s lacks the clean text", o)
		}
	}
	h := redact.NewHandler(slog.NewTextHandler(&bytes.Buffer{}, nil), r)
	for name, v := range map[string]any{
		"error":         err,
		"wrapped error": fmt.Errorf("open: %w", err),
		"twice wrapped": fmt.Errorf("a: %w", fmt.Errorf("b: %w", err)),
		"joined":        errors.Join(err, errors.New("other")),
		"Redactor":      r,
		"*Redactor":     &r,
		"Handler":       h,
		"Handler value": *h,
		"in a struct":   struct{ R redact.Redactor }{r},
		// fmt calls no method of an unexported field: it prints the
		// field's contents by reflection.
		"unexported field":  struct{ r redact.Redactor }{r},
		"*unexported field": &struct{ r redact.Redactor }{r},
		"in a slice":        []any{r, err},
		"unwrapped":         errors.Unwrap(err),
	} {
		t.Run(name, func(t *testing.T) { checkNoSecret(t, secret, printed(v)) })
	}
	for _, v := range []any{r, &r, h} {
		if s := fmt.Sprintf("%#v", v); !strings.Contains(s, "redact.") {
			t.Errorf("%%#v = %q, want it to name its type", s)
		}
	}
}

// TestOpenErrorFormat goes through a real path: go-redis quotes an option
// name that is also the URL's password, so redisstore.Open returns a
// redacting error; no verb may print the password.
func TestOpenErrorFormat(t *testing.T) {
	const secret = "JQVWZZZZ"
	for _, u := range []string{
		"redis://user:" + secret + "@127.0.0.1:1/0?" + secret + "=1",
		"redis+cluster://user:" + secret + "@127.0.0.1:1?" + secret + "=1",
		"redis+sentinel://user:" + secret + "@127.0.0.1:1/m?" + secret + "=1",
	} {
		_, err := redisstore.Open(context.Background(), u, redisstore.Options{})
		if err == nil {
			t.Fatalf("%s opened", redact.URL(u))
		}
		if !strings.Contains(err.Error(), "xxxxx") {
			t.Fatalf("%v: want the echoed password masked", err)
		}
		checkNoSecret(t, secret, append(printed(err), printed(fmt.Errorf("w: %w", err))...))
	}
}

// TestFormatEmpty: the zero Redactor prints as empty, without a slice.
func TestFormatEmpty(t *testing.T) {
	if s := fmt.Sprintf("%v|%#v", redact.Redactor{}, redact.Redactor{}); strings.Contains(s, "[") {
		t.Errorf("zero Redactor prints %q", s)
	}
}
