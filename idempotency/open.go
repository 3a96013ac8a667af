package idempotency

import (
	"context"
	"fmt"

	"github.com/acemq/msgaudit/internal/redact"
	"github.com/acemq/msgaudit/internal/schemereg"
)

// Opener opens a store from a URL whose scheme it was registered for. It
// receives the whole URL and Options that Open has already validated.
type Opener func(ctx context.Context, rawURL string, o Options) (Store, error)

// registry maps a lower-case URL scheme to its Opener. Backend packages fill
// it from their init functions, the way database/sql drivers register; the
// map names the package to import for the schemes of the backends in this
// module, for the error Open returns when none is registered.
var registry = schemereg.New[Opener]("idempotency", "memory", map[string]string{
	"sqlite": "github.com/acemq/msgaudit/idempotency/sqlitestore",
	"redis":  "github.com/acemq/msgaudit/idempotency/redisstore",
	"rediss": "github.com/acemq/msgaudit/idempotency/redisstore",
	// Redis Cluster and Sentinel.
	"redis+cluster":   "github.com/acemq/msgaudit/idempotency/redisstore",
	"rediss+cluster":  "github.com/acemq/msgaudit/idempotency/redisstore",
	"redis+sentinel":  "github.com/acemq/msgaudit/idempotency/redisstore",
	"rediss+sentinel": "github.com/acemq/msgaudit/idempotency/redisstore",
	"postgres":        "github.com/acemq/msgaudit/idempotency/pgstore",
	"postgresql":      "github.com/acemq/msgaudit/idempotency/pgstore",
})

// Register makes a backend available to Open for URLs with the given
// scheme (matched case-insensitively). Backend packages call it from init;
// a program chooses its backends by importing them, for example
//
//	import _ "github.com/acemq/msgaudit/idempotency/redisstore"
//
// Register panics when scheme is empty or "memory", opener is nil, or the
// scheme is already registered: all are programming errors found at start.
func Register(scheme string, opener Opener) { registry.Register(scheme, opener, opener == nil) }

// schemes returns the registered URL schemes, sorted, "memory" included.
func schemes() []string { return registry.Schemes() }

// Open opens the store a URL names. "memory" is NewMemory and always
// available; every other scheme is served by the backend package that
// registered it:
//
//	sqlite:PATH, sqlite://PATH      idempotency/sqlitestore
//	redis://…, rediss://…           idempotency/redisstore
//	redis+cluster://…, redis+sentinel://… (rediss+… for TLS)
//	                                idempotency/redisstore
//	postgres://…, postgresql://…    idempotency/pgstore
//
// The scheme is matched case-insensitively. A scheme no imported package
// registered is ErrUnsupportedURL, and the error names the package to
// import when it is one of the above. Errors never contain a password: URLs
// in them have it masked. Invalid Options are ErrOptions, and a
// context that is already done returns its error with nothing opened.
func Open(ctx context.Context, rawURL string, o Options) (Store, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if err := o.validate(); err != nil {
		return nil, err
	}
	scheme, rest := schemereg.Scheme(rawURL)
	if scheme == "memory" {
		if rest != "" {
			return nil, fmt.Errorf("%w: %q: memory takes no path", ErrUnsupportedURL, redact.URL(rawURL))
		}
		m, err := NewMemory(o)
		if err != nil {
			return nil, err
		}
		return m, nil
	}
	opener, err := lookup(scheme, redact.URL(rawURL))
	if err != nil {
		return nil, err
	}
	return opener(ctx, rawURL, o)
}

// CheckScheme returns the error Open would return for rawURL's scheme when
// no imported package serves it, and nil when one does (or for "memory").
// The error names the scheme only, never the URL. It does no I/O and
// checks nothing but the scheme, so a configuration can
// name the missing import when it is built rather than when the store is
// first opened.
func CheckScheme(rawURL string) error {
	scheme, _ := schemereg.Scheme(rawURL)
	if scheme == "memory" {
		return nil
	}
	_, err := lookup(scheme, scheme+":…")
	return err
}

// lookup returns the Opener registered for the lower-case scheme, or an
// ErrUnsupportedURL naming the package to import. shown is how the error
// names the URL: redacted, or the scheme alone.
func lookup(scheme, shown string) (Opener, error) {
	return registry.Lookup(scheme, shown, "memory, sqlite:PATH, redis://, rediss://, redis+cluster://, redis+sentinel://, postgres:// or postgresql://", ErrUnsupportedURL)
}
