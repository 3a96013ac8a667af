package metadata

import (
	"context"

	"github.com/acemq/msgaudit/internal/redact"
	"github.com/acemq/msgaudit/internal/schemereg"
)

// Opener opens a store from a URL whose scheme it was registered for.
type Opener func(ctx context.Context, rawURL string) (StoreCloser, error)

// registry maps a lower-case URL scheme to its Opener; backend packages
// fill it from init. The map names the package to import for this
// module's schemes.
var registry = schemereg.New[Opener]("metadata", "memory", map[string]string{
	"sqlite": "github.com/acemq/msgaudit/metadata/sqlitemeta",
	"redis":  "github.com/acemq/msgaudit/metadata/redismeta",
	"rediss": "github.com/acemq/msgaudit/metadata/redismeta",
	// Redis Cluster and Sentinel.
	"redis+cluster":   "github.com/acemq/msgaudit/metadata/redismeta",
	"rediss+cluster":  "github.com/acemq/msgaudit/metadata/redismeta",
	"redis+sentinel":  "github.com/acemq/msgaudit/metadata/redismeta",
	"rediss+sentinel": "github.com/acemq/msgaudit/metadata/redismeta",
	"postgres":        "github.com/acemq/msgaudit/metadata/pgmeta",
	"postgresql":      "github.com/acemq/msgaudit/metadata/pgmeta",
})

// Register makes a backend available to Open for URLs with the given
// scheme (matched case-insensitively); backend packages call it from init.
// It panics when scheme is empty, "memory" or holds ':' or '/', opener is
// nil, or the scheme is already registered.
func Register(scheme string, opener Opener) { registry.Register(scheme, opener, opener == nil) }

// schemes returns the registered URL schemes, sorted, "memory" included.
func schemes() []string { return registry.Schemes() }

// Open returns a store for rawURL. "memory" (a new Memory store) is always
// available; the other schemes are served by the backend package that
// registered them:
//
//	sqlite:PATH[?msgaudit_table=NAME]       metadata/sqlitemeta
//	redis://[user:pass@]host:port/db[?msgaudit_prefix=P]
//	                                        metadata/redismeta (rediss:// for TLS)
//	redis+cluster://host:port[,host:port…][?msgaudit_prefix=P]
//	redis+sentinel://host:port[,host:port…]/MASTER[/db][?msgaudit_prefix=P]
//	                                        metadata/redismeta (rediss+… for TLS)
//	postgres://…[?msgaudit_table=NAME]      metadata/pgmeta (postgresql:// too)
//
// The parameter names are those of idempotency.Open. Open checks the
// connection (Redis PING, PostgreSQL and SQLite create the table if
// missing) so a wrong address or password fails here. Close releases what
// Open created. A scheme no imported package serves is ErrUnsupportedURL
// naming the package to import. Errors never contain the password: Open
// masks it, and the query parameters that may hold one.
func Open(ctx context.Context, rawURL string) (StoreCloser, error) {
	scheme, _ := schemereg.Scheme(rawURL)
	if scheme == "memory" {
		return NewMemory(), nil
	}
	opener, err := registry.Lookup(scheme, redact.Strict(rawURL), "", ErrUnsupportedURL)
	if err != nil {
		return nil, err
	}
	return opener(ctx, rawURL)
}
