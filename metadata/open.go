package metadata

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"

	"github.com/acemq/msgaudit/internal/redact"
)

// Opener opens a store from a URL whose scheme it was registered for.
type Opener func(ctx context.Context, rawURL string) (StoreCloser, error)

// registry maps a lower-case URL scheme to its Opener; backend packages
// fill it from init.
var registry = struct {
	sync.RWMutex
	m map[string]Opener
}{m: map[string]Opener{}}

// backendPackages names the package to import for this module's schemes.
var backendPackages = map[string]string{
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
}

// Register makes a backend available to Open for URLs with the given
// scheme (matched case-insensitively); backend packages call it from init.
// It panics when scheme is empty, "memory" or holds ':' or '/', opener is
// nil, or the scheme is already registered.
func Register(scheme string, opener Opener) {
	s := strings.ToLower(scheme)
	if s == "" || s == "memory" || strings.ContainsAny(s, ":/") {
		panic(fmt.Sprintf("metadata: Register: invalid scheme %q", scheme))
	}
	if opener == nil {
		panic("metadata: Register: nil Opener for scheme " + s)
	}
	registry.Lock()
	defer registry.Unlock()
	if _, dup := registry.m[s]; dup {
		panic("metadata: Register called twice for scheme " + s)
	}
	registry.m[s] = opener
}

// Schemes returns the registered URL schemes, sorted, "memory" included.
func Schemes() []string {
	registry.RLock()
	defer registry.RUnlock()
	out := []string{"memory"}
	for s := range registry.m {
		out = append(out, s)
	}
	sort.Strings(out)
	return out
}

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
// reports the URL as RedactURL does.
func Open(ctx context.Context, rawURL string) (StoreCloser, error) {
	scheme, _, _ := strings.Cut(rawURL, ":")
	scheme = strings.ToLower(scheme)
	if scheme == "memory" {
		return NewMemory(), nil
	}
	registry.RLock()
	opener := registry.m[scheme]
	registry.RUnlock()
	if opener != nil {
		return opener(ctx, rawURL)
	}
	if pkg, ok := backendPackages[scheme]; ok {
		return nil, fmt.Errorf("%w: no backend for %q; import _ %q", ErrUnsupportedURL, RedactURL(rawURL), pkg)
	}
	return nil, fmt.Errorf("%w: %q", ErrUnsupportedURL, RedactURL(rawURL))
}

// RedactURL returns rawURL with any password replaced by "xxxxx", for logs
// and error messages: idempotency.RedactURL, plus the opaque form
// "scheme:user:pass@host" (no "//"), which is reduced to its scheme.
func RedactURL(rawURL string) string { return redact.Strict(rawURL) }
