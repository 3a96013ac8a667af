// Package pgmeta is the PostgreSQL backend of package metadata (pgx v5).
// Importing it registers the "postgres" and "postgresql" schemes with
// metadata.Open:
//
//	import _ "github.com/acemq/msgaudit/metadata/pgmeta"
//
//	s, err := metadata.Open(ctx, "postgres://app@db/app?msgaudit_table=meta")
//
// New uses a pool the caller made (for a client certificate, say).
//
// Behind a pooler in transaction mode (PgBouncer without
// max_prepared_statements), add default_query_exec_mode=exec to the URL:
// pgx's default statement cache does not survive statements moving between
// server connections, and the calls fail with an error that says so.
package pgmeta

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/acemq/msgaudit/internal/metaurl"
	"github.com/acemq/msgaudit/internal/redact"
	"github.com/acemq/msgaudit/metadata"
)

func init() {
	metadata.Register("postgres", openPostgresURL)
	metadata.Register("postgresql", openPostgresURL)
}

func openPostgresURL(ctx context.Context, rawURL string) (metadata.StoreCloser, error) {
	if err := metaurl.CheckURL(rawURL); err != nil {
		return nil, err
	}
	table, rest, err := metaurl.CutParam(rawURL, metaurl.TableParam, defaultTable)
	if err != nil {
		return nil, err
	}
	cfg, err := pgxpool.ParseConfig(rest)
	if err != nil {
		return nil, fmt.Errorf("%w: %q: cannot parse PostgreSQL URL", metadata.ErrUnsupportedURL, redact.Strict(rawURL))
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, metaurl.RedactError(fmt.Errorf("metadata: postgres %s: %w", redact.Strict(rawURL), err), rawURL)
	}
	s, err := newStore(pool, table)
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
		return nil, metaurl.RedactError(fmt.Errorf("metadata: postgres %s: migrate: %w", redact.Strict(rawURL), cause), rawURL)
	}
	return s, nil
}
