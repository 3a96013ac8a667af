package sqlitemeta

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"

	_ "modernc.org/sqlite" // registers the "sqlite" driver (pure Go)

	"github.com/acemq/msgaudit/internal/metasql"
	"github.com/acemq/msgaudit/internal/sqldb"
	"github.com/acemq/msgaudit/metadata"
)

// Store is a metadata.Store in one table of an SQLite database file (key BLOB
// primary key, value BLOB): the embedded durable backend. SQLite serialises
// writers, so Replace's UPDATE … WHERE value = old is a compare-and-set even
// across processes sharing the file.
type Store struct {
	db    *sql.DB
	owned bool // Close closes db

	core   *metasql.Store
	table  string // quoted
	schema string // the table's schema, unquoted
}

var _ metadata.StoreCloser = (*Store)(nil)

// Open opens (creating if needed) the database file at path in WAL
// mode with a busy timeout, creates the table opts.Table and returns a
// store on it. Close closes the database.
func Open(ctx context.Context, path string, opts Options) (*Store, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return openSQLite(ctx, path, cmp.Or(opts.Table, defaultTable))
}

func openSQLite(ctx context.Context, path, table string) (*Store, error) {
	if path == "" {
		return nil, errors.New("metadata: sqlitemeta.Open: empty path")
	}
	q := url.Values{}
	q.Add("_pragma", "busy_timeout(10000)")
	q.Add("_pragma", "journal_mode(WAL)")
	q.Add("_pragma", "synchronous(NORMAL)")
	db, err := sql.Open("sqlite", "file:"+path+"?"+q.Encode())
	if err != nil {
		return nil, fmt.Errorf("metadata: open sqlite: %w", err)
	}
	s, err := newStore(db, table)
	if err != nil {
		db.Close()
		return nil, err
	}
	s.owned = true
	if err := s.Migrate(ctx); err != nil {
		db.Close()
		return nil, err
	}
	return s, nil
}

// New returns a store on opts.Table in db, a database opened with the
// "sqlite" driver of modernc.org/sqlite that the application may share;
// Close leaves it open. Set a busy timeout on db (the _pragma=busy_timeout
// DSN parameter) when several connections write. New does no I/O: call
// Migrate once to create the table.
func New(ctx context.Context, db *sql.DB, opts Options) (*Store, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return newStore(db, cmp.Or(opts.Table, defaultTable))
}

// newStore is New with the table settled.
func newStore(db *sql.DB, table string) (*Store, error) {
	if db == nil {
		return nil, errors.New("metadata: sqlitemeta.New: nil db")
	}
	q, schema, err := quoteTable(table)
	if err != nil {
		return nil, err
	}
	return &Store{db: db, table: q, schema: schema, core: metasql.New(sqldb.Std(db), metasql.Dialect{
		Name:    "sqlite",
		Get:     `SELECT value FROM ` + q + ` WHERE key = ?`,
		Insert:  `INSERT INTO ` + q + ` (key, value, updated_at) VALUES (?, ?, unixepoch()) ON CONFLICT (key) DO NOTHING`,
		Replace: `UPDATE ` + q + ` SET value = ?, updated_at = unixepoch() WHERE key = ? AND value = ?`,
		Remove:  `DELETE FROM ` + q + ` WHERE key = ? AND value = ?`,
	})}, nil
}

// Migrate creates the table if it does not exist. It is idempotent. It
// refuses (ErrInvalidName) a table in a database without a file, such as
// ":memory:", whose values would vanish with the connection.
func (s *Store) Migrate(ctx context.Context) error {
	_, err := s.db.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS `+s.table+` (
	key BLOB PRIMARY KEY,
	value BLOB NOT NULL,
	updated_at INTEGER NOT NULL
) WITHOUT ROWID`)
	if err != nil {
		return fmt.Errorf("metadata: sqlite migrate: %w", err)
	}
	// A database without a file (":memory:", mode=memory, or the
	// temporary one) loses its values when the connection closes, and
	// each pooled connection has its own.
	var file string
	if err := s.db.QueryRowContext(ctx, `SELECT file FROM pragma_database_list WHERE name = ?`, s.schema).Scan(&file); err != nil {
		return fmt.Errorf("metadata: sqlite migrate: schema %s: %w", s.schema, err)
	}
	if file == "" {
		return fmt.Errorf("metadata: sqlite migrate: %w: schema %s is in memory, not in a file: its values would vanish with the connection", metadata.ErrInvalidName, s.schema)
	}
	return nil
}

// Get implements metadata.Store.
func (s *Store) Get(ctx context.Context, key string) (string, bool, error) {
	return s.core.Get(ctx, key)
}

// PutIfAbsent implements metadata.Store: an INSERT … ON CONFLICT DO NOTHING
// and, when that inserted nothing, a read of the value already there.
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

// Close closes the database if Open opened it; a db passed to
// New is left open.
func (s *Store) Close() error {
	if s.owned {
		return s.db.Close()
	}
	return nil
}
