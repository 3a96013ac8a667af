package metadata

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"

	"github.com/acemq/msgaudit/internal/redact"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"
)

// Query parameters Open removes from a URL before the driver sees it.
const (
	tableParam  = "msgaudit_table"
	prefixParam = "msgaudit_prefix"
)

// Open returns a store for rawURL:
//
//	memory                                  a new Memory store
//	sqlite:PATH[?msgaudit_table=NAME]       SQLite file at PATH (created, WAL)
//	redis://[user:pass@]host:port/db[?msgaudit_prefix=P]
//	                                        Redis (rediss:// for TLS); other
//	                                        query options as redis.ParseURL
//	postgres://…[?msgaudit_table=NAME]      PostgreSQL (postgresql:// too; the
//	                                        usual fields, sslmode, sslrootcert…)
//
// The parameter names are those of idempotency.Open. The table defaults to
// DefaultTable and the Redis prefix to DefaultRedisPrefix. For a TLS
// configuration a URL cannot express (a custom CA for Redis, a client
// certificate), build the client or pool yourself and call NewRedis or
// NewPostgres. Open checks the connection (Redis PING, PostgreSQL and
// SQLite create the table if missing) so a wrong address or password fails
// here. Close releases what Open created. Errors never contain the
// password: Open reports the URL as RedactURL does.
func Open(ctx context.Context, rawURL string) (StoreCloser, error) {
	scheme, _, _ := strings.Cut(rawURL, ":")
	switch strings.ToLower(scheme) {
	case "memory":
		return NewMemory(), nil
	case "sqlite":
		return openSQLiteURL(ctx, rawURL)
	case "redis", "rediss":
		return openRedisURL(ctx, rawURL)
	case "postgres", "postgresql":
		return openPostgresURL(ctx, rawURL)
	}
	return nil, fmt.Errorf("%w: %q", ErrUnsupportedURL, RedactURL(rawURL))
}

// RedactURL returns rawURL with any password replaced by "xxxxx", for logs
// and error messages: idempotency.RedactURL, plus the opaque form
// "scheme:user:pass@host" (no "//"), which is reduced to its scheme.
func RedactURL(rawURL string) string { return redact.Strict(rawURL) }

// cutParam removes the query parameter name from rawURL and returns its
// value (def when absent) and the URL without it.
func cutParam(rawURL, name, def string) (value, rest string, err error) {
	base, query, ok := strings.Cut(rawURL, "?")
	if !ok {
		return def, rawURL, nil
	}
	q, err := url.ParseQuery(query)
	if err != nil {
		return "", "", fmt.Errorf("%w: %q: bad query: %v", ErrUnsupportedURL, RedactURL(base), err)
	}
	value = def
	if vs, ok := q[name]; ok {
		value = vs[len(vs)-1]
		delete(q, name)
	}
	if len(q) == 0 {
		return value, base, nil
	}
	return value, base + "?" + q.Encode(), nil
}

func openSQLiteURL(ctx context.Context, rawURL string) (StoreCloser, error) {
	table, rest, err := cutParam(rawURL, tableParam, DefaultTable)
	if err != nil {
		return nil, err
	}
	path := rest[len("sqlite:"):]
	path = strings.TrimPrefix(path, "//")
	if strings.Contains(path, "?") {
		return nil, fmt.Errorf("%w: sqlite URL takes only the table parameter: %q", ErrUnsupportedURL, rawURL)
	}
	return openSQLite(ctx, path, table)
}

// checkURL refuses a URL that net/url cannot split as a backend would
// (see redact.ParseURL), with an error that quotes no part of its
// password.
func checkURL(rawURL string) error {
	if _, err := redact.ParseURL(rawURL); err != nil {
		return fmt.Errorf("%w: %w", ErrUnsupportedURL, err)
	}
	return nil
}

// redactError returns err with every secret of rawURL masked (see
// redact.URLSecrets); errors.Is and errors.As still see err's chain.
func redactError(err error, rawURL string) error {
	return redact.New(redact.URLSecrets(rawURL)...).Error(err)
}

func openRedisURL(ctx context.Context, rawURL string) (StoreCloser, error) {
	if err := checkURL(rawURL); err != nil {
		return nil, err
	}
	prefix, rest, err := cutParam(rawURL, prefixParam, DefaultRedisPrefix)
	if err != nil {
		return nil, err
	}
	opt, err := redis.ParseURL(rest)
	if err != nil {
		// go-redis errors can quote the URL; report only the redacted one.
		return nil, fmt.Errorf("%w: %q: cannot parse Redis URL", ErrUnsupportedURL, RedactURL(rawURL))
	}
	client := redis.NewClient(opt)
	s, err := NewRedis(client, prefix)
	if err != nil {
		client.Close()
		return nil, err
	}
	s.owned = true
	if err := client.Ping(ctx).Err(); err != nil {
		client.Close()
		return nil, redactError(fmt.Errorf("metadata: redis %s: %w", RedactURL(rawURL), err), rawURL)
	}
	return s, nil
}

func openPostgresURL(ctx context.Context, rawURL string) (StoreCloser, error) {
	if err := checkURL(rawURL); err != nil {
		return nil, err
	}
	table, rest, err := cutParam(rawURL, tableParam, DefaultTable)
	if err != nil {
		return nil, err
	}
	cfg, err := pgxpool.ParseConfig(rest)
	if err != nil {
		return nil, fmt.Errorf("%w: %q: cannot parse PostgreSQL URL", ErrUnsupportedURL, RedactURL(rawURL))
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, redactError(fmt.Errorf("metadata: postgres %s: %w", RedactURL(rawURL), err), rawURL)
	}
	s, err := NewPostgres(pool, table)
	if err != nil {
		pool.Close()
		return nil, err
	}
	s.owned = true
	if err := s.Migrate(ctx); err != nil {
		pool.Close()
		// Migrate's error already says "metadata: postgres migrate: ";
		// keep its cause under one prefix.
		cause := errors.Unwrap(err)
		if cause == nil {
			cause = err
		}
		return nil, redactError(fmt.Errorf("metadata: postgres %s: migrate: %w", RedactURL(rawURL), cause), rawURL)
	}
	return s, nil
}
