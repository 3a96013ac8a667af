// Package mysqlmeta is the MySQL and MariaDB backend of package metadata
// (github.com/go-sql-driver/mysql): one InnoDB table of keys and values,
// shared by the processes that use it.
//
// Importing it registers the "mysql" scheme with metadata.Open:
//
//	import _ "github.com/acemq/msgaudit/metadata/mysqlmeta"
//
//	s, err := metadata.Open(ctx, "mysql://app:secret@db:3306/app?msgaudit_table=meta")
//
// New builds a store on a *sql.DB the caller opened (run Migrate once to
// create the table); Open connects from a URL and migrates.
package mysqlmeta

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"regexp"
	"strings"

	"github.com/go-sql-driver/mysql"

	"github.com/acemq/msgaudit/internal/metasql"
	"github.com/acemq/msgaudit/internal/metaurl"
	"github.com/acemq/msgaudit/internal/mysqlurl"
	"github.com/acemq/msgaudit/internal/redact"
	"github.com/acemq/msgaudit/internal/sqldb"
	"github.com/acemq/msgaudit/metadata"
)

func init() { metadata.Register("mysql", openURL) }

// defaultTable is the table's name when Options.Table is "".
const defaultTable = "msgaudit_metadata"

// Options configure a Store.
type Options struct {
	// Table is the store's table, [schema.]name of letters, digits and
	// '_'; "" means "msgaudit_metadata".
	Table string
}

var tableName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,63}(\.[A-Za-z_][A-Za-z0-9_]{0,63})?$`)

// Store is a metadata.Store on a MySQL or MariaDB table. Keys and values
// are stored as bytes.
type Store struct {
	db     *sql.DB
	owned  bool
	schema string
	name   string

	core                 *metasql.Store
	createSQL, engineSQL string
}

var _ metadata.StoreCloser = (*Store)(nil)

// New returns a store on db's table; it refuses a table name that is not
// a plain or schema-qualified identifier, before any I/O. db stays the
// caller's.
func New(ctx context.Context, db *sql.DB, opts Options) (*Store, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if db == nil {
		return nil, errors.New("metadata: mysqlmeta.New: nil *sql.DB")
	}
	table := cmp.Or(opts.Table, defaultTable)
	if !tableName.MatchString(table) {
		return nil, fmt.Errorf("%w: table %q", metadata.ErrInvalidName, table)
	}
	s := &Store{db: db}
	if schema, name, ok := strings.Cut(table, "."); ok {
		s.schema, s.name = schema, name
	} else {
		s.name = table
	}
	t := "`" + s.name + "`"
	if s.schema != "" {
		t = "`" + s.schema + "`." + t
	}
	s.createSQL = `CREATE TABLE IF NOT EXISTS ` + t + ` (
	k          VARBINARY(512) NOT NULL PRIMARY KEY,
	v          MEDIUMBLOB     NOT NULL,
	updated_at DATETIME(6)    NOT NULL DEFAULT CURRENT_TIMESTAMP(6)
) ENGINE=InnoDB`
	s.engineSQL = `SELECT ENGINE FROM information_schema.TABLES WHERE TABLE_SCHEMA = COALESCE(NULLIF(?, ''), DATABASE()) AND TABLE_NAME = ?`
	s.core = metasql.New(sqldb.Std(db), metasql.Dialect{
		Name:   "mysql",
		Get:    `SELECT v FROM ` + t + ` WHERE k = ?`,
		Insert: `INSERT INTO ` + t + ` (k, v) VALUES (?, ?)`,
		// updated_at changes on every replace, so a matched row always
		// counts as changed, whatever the connection's clientFoundRows,
		// but for the same value in the same microsecond: Same.
		Replace:   `UPDATE ` + t + ` SET v = ?, updated_at = NOW(6) WHERE k = ? AND v = ?`,
		Same:      `SELECT EXISTS (SELECT 1 FROM ` + t + ` WHERE k = ? AND v = ?)`,
		Remove:    `DELETE FROM ` + t + ` WHERE k = ? AND v = ?`,
		Duplicate: duplicateKey,
	})
	return s, nil
}

// Migrate creates the table if it does not exist and refuses one that is
// not InnoDB (without transactions a crash can leave a half-written
// value). It is idempotent.
func (s *Store) Migrate(ctx context.Context) error {
	if _, err := s.db.ExecContext(ctx, s.createSQL); err != nil {
		return fmt.Errorf("metadata: mysql migrate: %w", err)
	}
	var engine string
	if err := s.db.QueryRowContext(ctx, s.engineSQL, s.schema, s.name).Scan(&engine); err != nil {
		return fmt.Errorf("metadata: mysql migrate: reading the table's engine: %w", err)
	}
	if !strings.EqualFold(engine, "InnoDB") {
		return fmt.Errorf("metadata: mysql migrate: %w: table %s uses the %s engine, not InnoDB", metadata.ErrInvalidName, s.name, engine)
	}
	return nil
}

// Get implements metadata.Store.
func (s *Store) Get(ctx context.Context, key string) (string, bool, error) {
	return s.core.Get(ctx, key)
}

// PutIfAbsent implements metadata.Store: the INSERT either stores the
// value or fails on the primary key (error 1062), and then the value
// already stored is read; a value removed in between is tried again.
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

// duplicateKey reports a primary key's duplicate entry (error 1062).
func duplicateKey(err error) bool {
	var me *mysql.MySQLError
	return errors.As(err, &me) && me.Number == 1062
}

// Close closes the connections if Open made them; a *sql.DB passed to
// New is left open.
func (s *Store) Close() error {
	if s.owned {
		return s.db.Close()
	}
	return nil
}

// openURL is metadata.Open's entry for mysql:// URLs; the query parameter
// msgaudit_table names the table.
func openURL(ctx context.Context, rawURL string) (metadata.StoreCloser, error) {
	if err := metaurl.CheckURL(rawURL); err != nil {
		return nil, err
	}
	table, rest, err := metaurl.CutParam(rawURL, metaurl.TableParam, defaultTable)
	if err != nil {
		return nil, err
	}
	cfg, err := mysqlurl.Config(rest)
	if err != nil {
		return nil, fmt.Errorf("%w: %q: %v", metadata.ErrUnsupportedURL, redact.Strict(rawURL), err)
	}
	conn, err := mysql.NewConnector(cfg)
	if err != nil {
		return nil, fmt.Errorf("%w: %q: %v", metadata.ErrUnsupportedURL, redact.Strict(rawURL), err)
	}
	db := sql.OpenDB(conn)
	s, err := New(ctx, db, Options{Table: table})
	if err != nil {
		db.Close()
		return nil, err
	}
	s.owned = true
	if err := s.Migrate(ctx); err != nil {
		db.Close()
		return nil, metaurl.RedactError(fmt.Errorf("metadata: mysql %s: %w", redact.Strict(rawURL), err), rawURL)
	}
	return s, nil
}
