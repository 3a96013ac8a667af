package idempotency

import (
	"context"
	"fmt"
	"strings"
)

// Open opens the store a URL names:
//
//	memory                          NewMemory
//	sqlite:PATH, sqlite://PATH      OpenSQLite(PATH); sqlite:///abs/x.db is /abs/x.db
//	redis://…, rediss://…           NewRedisURL (see there for the URL form)
//	postgres://…, postgresql://…    OpenPostgresURL (see there)
//
// The scheme is matched case-insensitively. Errors never contain a
// password: URLs in them go through RedactURL. Invalid Options are
// ErrOptions, an unknown scheme ErrUnsupportedURL, and a context that is
// already done returns its error with nothing opened.
func Open(ctx context.Context, rawURL string, o Options) (Store, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if err := o.Validate(); err != nil {
		return nil, err
	}
	scheme, rest, _ := strings.Cut(rawURL, ":")
	switch strings.ToLower(scheme) {
	case "memory":
		if rest != "" {
			return nil, fmt.Errorf("%w: %q: memory takes no path", ErrUnsupportedURL, RedactURL(rawURL))
		}
		return NewMemory(o), nil
	case "sqlite":
		path := strings.TrimPrefix(rest, "//")
		if path == "" {
			return nil, fmt.Errorf("%w: %q: sqlite needs a file path", ErrUnsupportedURL, RedactURL(rawURL))
		}
		s, err := OpenSQLite(path, o)
		if err != nil {
			return nil, err
		}
		return s, nil
	case "redis", "rediss":
		return openRedisURL(ctx, rawURL, o)
	case "postgres", "postgresql":
		return openPostgresURL(ctx, rawURL, o)
	}
	return nil, fmt.Errorf("%w: %q (want memory, sqlite:PATH, redis://, rediss://, postgres:// or postgresql://)", ErrUnsupportedURL, RedactURL(rawURL))
}
