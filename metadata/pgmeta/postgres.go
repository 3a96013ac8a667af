package pgmeta

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"regexp"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/acemq/msgaudit/internal/metasql"
	"github.com/acemq/msgaudit/internal/pgpooler"
	"github.com/acemq/msgaudit/internal/pgtable"
	"github.com/acemq/msgaudit/internal/sqldb/pgxdb"
	"github.com/acemq/msgaudit/metadata"
)

// defaultTable is the table when Options.Table and the URL name none.
const defaultTable = "msgaudit_metadata"

// Options configures a PostgreSQL metadata store. The zero value means
// every default.
type Options struct {
	// Table is the store's table, plain or schema.table; a temporary
	// schema such as pg_temp, private to each connection, is refused.
	// Empty means "msgaudit_metadata".
	Table string
}

// tableName accepts a plain or schema-qualified SQL identifier.
var tableName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,62}(\.[A-Za-z_][A-Za-z0-9_]{0,62})?$`)

// quoteTable validates name and returns it quoted for SQL text.
func quoteTable(name string) (string, error) {
	if !tableName.MatchString(name) {
		return "", fmt.Errorf("%w: table %q", metadata.ErrInvalidName, name)
	}
	if schema, _, ok := strings.Cut(name, "."); ok && pgtable.TempSchema.MatchString(schema) {
		return "", fmt.Errorf("%w: table %q is in a temporary schema, private to each pooled connection", metadata.ErrInvalidName, name)
	}
	return pgx.Identifier(strings.Split(name, ".")).Sanitize(), nil
}

// Store is a metadata.Store in one PostgreSQL table (key bytea primary key, value
// bytea). Every operation is one statement; Replace is a single
// UPDATE … WHERE value = old, which PostgreSQL re-checks on the newest row
// version when two updates race, so exactly one of them wins.
type Store struct {
	pool  *pgxpool.Pool
	table string // quoted
	owned bool   // Close closes pool

	core *metasql.Store
}

var _ metadata.StoreCloser = (*Store)(nil)

// New returns a store on opts.Table reached through pool, which the
// application may share with other work; Close leaves it open. New does
// no I/O: call Migrate once to create the table.
func New(ctx context.Context, pool *pgxpool.Pool, opts Options) (*Store, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return newStore(pool, cmp.Or(opts.Table, defaultTable))
}

// newStore is New with the table settled; an empty one (from a URL's
// msgaudit_table=) is refused.
func newStore(pool *pgxpool.Pool, table string) (*Store, error) {
	if pool == nil {
		return nil, errors.New("metadata: pgmeta.New: nil pool")
	}
	q, err := quoteTable(table)
	if err != nil {
		return nil, err
	}
	return &Store{pool: pool, table: q, core: metasql.New(pgxdb.Pool(pool), metasql.Dialect{
		Name: "postgres",
		Get:  `SELECT value FROM ` + q + ` WHERE key = $1`,
		// The CTE's INSERT is invisible to the outer SELECT, so the
		// statement returns (true, value) when it inserted, (false, prev)
		// when the key was there before the statement began, and no row
		// when a concurrent insert committed after that: retried.
		PutReturning: `WITH ins AS (INSERT INTO ` + q + ` (key, value) VALUES ($1, $2)
	ON CONFLICT (key) DO NOTHING RETURNING value)
SELECT true, value FROM ins
UNION ALL
SELECT false, value FROM ` + q + ` WHERE key = $1`,
		Replace: `UPDATE ` + q + ` SET value = $1, updated_at = now() WHERE key = $2 AND value = $3`,
		Remove:  `DELETE FROM ` + q + ` WHERE key = $1 AND value = $2`,
		Explain: pgpooler.Explain,
	})}, nil
}

// Migrate creates the table if it does not exist. It is idempotent. It
// then checks the table its name resolved to on that connection, and
// refuses (with ErrInvalidName) a temporary one (an unqualified name under
// a search_path that starts with pg_temp, which URL options can set) and
// an unlogged one (emptied by crash recovery, absent on standbys): both
// lose what was stored.
func (s *Store) Migrate(ctx context.Context) error {
	var bad error
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `CREATE TABLE IF NOT EXISTS `+s.table+` (
	key bytea PRIMARY KEY,
	value bytea NOT NULL,
	updated_at timestamptz NOT NULL DEFAULT now()
)`); err != nil {
			return err
		}
		var schema, persistence string
		err := tx.QueryRow(ctx, pgtable.Query, s.table).Scan(&schema, &persistence)
		if err != nil && !errors.Is(err, pgx.ErrNoRows) {
			return err
		}
		bad = pgtable.Check(s.table, err == nil, schema, persistence)
		return bad // rolls a temporary table's creation back
	})
	if bad != nil {
		return fmt.Errorf("metadata: postgres migrate: %w", fmt.Errorf("%w: %w", metadata.ErrInvalidName, bad))
	}
	if err != nil {
		return fmt.Errorf("metadata: postgres migrate: %w", pgpooler.Explain(err))
	}
	return nil
}

// Drop drops the table and everything in it (for tests and teardown).
func (s *Store) Drop(ctx context.Context) error {
	if _, err := s.pool.Exec(ctx, `DROP TABLE IF EXISTS `+s.table); err != nil {
		return fmt.Errorf("metadata: postgres drop: %w", pgpooler.Explain(err))
	}
	return nil
}

// Get implements metadata.Store.
func (s *Store) Get(ctx context.Context, key string) (string, bool, error) {
	return s.core.Get(ctx, key)
}

// PutIfAbsent implements metadata.Store: one statement inserts the value
// or reads the one already there.
func (s *Store) PutIfAbsent(ctx context.Context, key, value string) (string, bool, error) {
	return s.core.PutIfAbsent(ctx, key, value)
}

// Replace implements metadata.Store.
func (s *Store) Replace(ctx context.Context, key, old, new string) (bool, error) {
	return s.core.Replace(ctx, key, old, new)
}

// Remove implements metadata.Remover.
func (s *Store) Remove(ctx context.Context, key, value string) (bool, error) {
	return s.core.Remove(ctx, key, value)
}

// Close closes the pool if Open created it; a pool passed to New is
// left open.
func (s *Store) Close() error {
	if s.owned {
		s.pool.Close()
	}
	return nil
}
