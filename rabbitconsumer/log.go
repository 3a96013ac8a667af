package rabbitconsumer

import (
	"context"
	"fmt"
	"log/slog"
	"net/url"
	"strings"
)

// redactor removes secrets (URL passwords) from text headed for a log
// line or an error.
type redactor struct{ secrets []string }

// newRedactor collects the passwords of the given URLs.
func newRedactor(urls ...string) redactor {
	var r redactor
	for _, raw := range urls {
		u, err := url.Parse(raw)
		if err != nil {
			// Not a URL: mask the text between "://user:" and "@".
			if i := strings.Index(raw, "://"); i >= 0 {
				rest := raw[i+3:]
				if at := strings.LastIndexByte(rest, '@'); at >= 0 {
					if colon := strings.IndexByte(rest[:at], ':'); colon >= 0 && colon+1 < at {
						r.secrets = append(r.secrets, rest[colon+1:at])
					}
				}
			}
			continue
		}
		if u.User != nil {
			if p, ok := u.User.Password(); ok && p != "" {
				r.secrets = append(r.secrets, p, url.QueryEscape(p), url.PathEscape(p))
			}
		}
		for k, vs := range u.Query() {
			if strings.Contains(strings.ToLower(k), "pass") {
				for _, v := range vs {
					if v != "" {
						r.secrets = append(r.secrets, v)
					}
				}
			}
		}
	}
	return r
}

func (r redactor) String(s string) string {
	for _, p := range r.secrets {
		s = strings.ReplaceAll(s, p, "xxxxx")
	}
	return s
}

// redactedError keeps err's chain (errors.Is and As still work) but prints
// its message with the secrets replaced.
type redactedError struct {
	msg string
	err error
}

func (e *redactedError) Error() string { return e.msg }
func (e *redactedError) Unwrap() error { return e.err }

func (r redactor) Error(err error) error {
	if err == nil || len(r.secrets) == 0 {
		return err
	}
	msg := err.Error()
	if clean := r.String(msg); clean != msg {
		return &redactedError{msg: clean, err: err}
	}
	return err
}

// redactingHandler removes the secrets from every log record the consumer
// and its pipeline emit: the message and every attribute.
type redactingHandler struct {
	h   slog.Handler
	red redactor
}

func (r redactingHandler) Enabled(ctx context.Context, l slog.Level) bool { return r.h.Enabled(ctx, l) }

func (r redactingHandler) Handle(ctx context.Context, rec slog.Record) error {
	if len(r.red.secrets) == 0 {
		return r.h.Handle(ctx, rec)
	}
	out := slog.NewRecord(rec.Time, rec.Level, r.red.String(rec.Message), rec.PC)
	rec.Attrs(func(a slog.Attr) bool {
		out.AddAttrs(r.attr(a))
		return true
	})
	return r.h.Handle(ctx, out)
}

func (r redactingHandler) WithAttrs(as []slog.Attr) slog.Handler {
	clean := make([]slog.Attr, len(as))
	for i, a := range as {
		clean[i] = r.attr(a)
	}
	return redactingHandler{h: r.h.WithAttrs(clean), red: r.red}
}

func (r redactingHandler) WithGroup(name string) slog.Handler {
	return redactingHandler{h: r.h.WithGroup(name), red: r.red}
}

func (r redactingHandler) attr(a slog.Attr) slog.Attr {
	v := a.Value.Resolve()
	switch v.Kind() {
	case slog.KindString:
		return slog.String(a.Key, r.red.String(v.String()))
	case slog.KindGroup:
		g := v.Group()
		clean := make([]any, len(g))
		for i, ga := range g {
			clean[i] = r.attr(ga)
		}
		return slog.Group(a.Key, clean...)
	case slog.KindAny:
		switch x := v.Any().(type) {
		case nil:
			return a
		case error:
			return slog.String(a.Key, r.red.String(x.Error()))
		case fmt.Stringer:
			return slog.String(a.Key, r.red.String(x.String()))
		default:
			return slog.String(a.Key, r.red.String(fmt.Sprint(x)))
		}
	}
	return slog.Attr{Key: a.Key, Value: v}
}
