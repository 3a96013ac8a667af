package redact

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"
)

type stringer struct{ s string }

func (s stringer) String() string { return s.s }

type valuer struct{ s string }

func (v valuer) LogValue() slog.Value { return slog.StringValue(v.s) }

// TestHandler checks the log redaction on every kind of value.
func TestHandler(t *testing.T) {
	t.Parallel()
	const secret = "hunter2-long"
	var buf bytes.Buffer
	l := slog.New(NewHandler(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}), New(secret)))
	l = l.With("with", "w-"+secret, slog.Group("wg", "in", secret))
	l.Info("msg "+secret, "s", secret, "err", errors.New("e "+secret), "any", []string{secret},
		"str", stringer{"st " + secret}, "lv", valuer{"lv " + secret},
		slog.Group("g", "inner", secret, slog.Group("deep", "x", secret)), "n", 42, "d", time.Second, "nil", nil)
	l.WithGroup("grp").Warn("x", "k", secret)
	out := buf.String()
	if strings.Contains(out, secret) {
		t.Fatalf("log output leaks the secret:\n%s", out)
	}
	for _, want := range []string{"n=42", "d=1s", "nil=<nil>", `msg="msg xxxxx"`, "with=w-xxxxx", "wg.in=xxxxx", "s=xxxxx",
		`err="e xxxxx"`, "any=[xxxxx]", `str="st xxxxx"`, `lv="lv xxxxx"`, "g.inner=xxxxx", "g.deep.x=xxxxx", "grp.k=xxxxx"} {
		if !strings.Contains(out, want) {
			t.Errorf("log output lacks %q:\n%s", want, out)
		}
	}
}

func TestHandlerEnabledAndEmpty(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	h := NewHandler(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelWarn}), Redactor{})
	if h.Enabled(context.Background(), slog.LevelInfo) || !h.Enabled(context.Background(), slog.LevelError) {
		t.Error("Enabled must follow the wrapped handler")
	}
	slog.New(h).Warn("plain", "k", "v")
	if got := buf.String(); !strings.Contains(got, "msg=plain k=v") {
		t.Errorf("an empty Redactor must pass records unchanged: %q", got)
	}
}
