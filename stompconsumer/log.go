package stompconsumer

import (
	"context"
	"fmt"
	"log/slog"
)

// redactingHandler removes the passcode (and URL passwords) from every log
// record the consumer and the pipeline it builds emit: the message and
// every string, error or Stringer attribute.
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
		case error:
			return slog.String(a.Key, r.red.String(x.Error()))
		case fmt.Stringer:
			return slog.String(a.Key, r.red.String(x.String()))
		case nil:
			return a
		default:
			return slog.String(a.Key, r.red.String(fmt.Sprint(x)))
		}
	}
	return slog.Attr{Key: a.Key, Value: v}
}
