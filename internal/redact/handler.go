package redact

import (
	"context"
	"fmt"
	"log/slog"
)

// Handler is a slog.Handler that replaces the secrets of a Redactor in
// every record before passing it on: in the message and in every string,
// error, Stringer or other attribute value, inside groups too, and in the
// attributes given to WithAttrs.
type Handler struct {
	h   slog.Handler
	red Redactor
}

// NewHandler returns a Handler that redacts with red and writes to h.
func NewHandler(h slog.Handler, red Redactor) *Handler {
	return &Handler{h: h, red: red}
}

// GoString names the type and its Redactor, never the secrets.
func (r Handler) GoString() string { return "redact.Handler{" + r.red.GoString() + "}" }

// Format prints GoString for every verb (quoted for %q), so that no verb
// reaches the Redactor's secrets.
func (r Handler) Format(f fmt.State, verb rune) { Format(f, verb, r.GoString()) }

// Enabled reports whether the wrapped handler handles level l.
func (r *Handler) Enabled(ctx context.Context, l slog.Level) bool { return r.h.Enabled(ctx, l) }

// Handle passes a redacted copy of rec to the wrapped handler.
func (r *Handler) Handle(ctx context.Context, rec slog.Record) error {
	if r.red.Empty() {
		return r.h.Handle(ctx, rec)
	}
	out := slog.NewRecord(rec.Time, rec.Level, r.red.String(rec.Message), rec.PC)
	rec.Attrs(func(a slog.Attr) bool {
		out.AddAttrs(r.attr(a))
		return true
	})
	return r.h.Handle(ctx, out)
}

// WithAttrs returns a Handler whose wrapped handler has the redacted as.
func (r *Handler) WithAttrs(as []slog.Attr) slog.Handler {
	clean := make([]slog.Attr, len(as))
	for i, a := range as {
		clean[i] = r.attr(a)
	}
	return &Handler{h: r.h.WithAttrs(clean), red: r.red}
}

// WithGroup returns a Handler whose wrapped handler opens group name.
func (r *Handler) WithGroup(name string) slog.Handler {
	return &Handler{h: r.h.WithGroup(name), red: r.red}
}

func (r *Handler) attr(a slog.Attr) slog.Attr {
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
