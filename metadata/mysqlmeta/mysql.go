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

	"github.com/acemq/msgaudit/internal/metaurl"
	"github.com/acemq/msgaudit/internal/mysqlurl"
	"github.com/acemq/msgaudit/internal/redact"
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

	createSQL, engineSQL, getSQL, putSQL, replaceSQL, sameSQL, removeSQL string
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
	s.getSQL = `SELECT v FROM ` + t + ` WHERE k = ?`
	s.putSQL = `INSERT INTO ` + t + ` (k, v) VALUES (?, ?)`
	// updated_at changes on every replace, so a matched row always counts
	// as changed, whatever the connection's clientFoundRows.
	s.replaceSQL = `UPDATE ` + t + ` SET v = ?, updated_at = NOW(6) WHERE k = ? AND v = ?`
	s.sameSQL = `SELECT EXISTS (SELECT 1 FROM ` + t + ` WHERE k = ? AND v = ?)`
	s.removeSQL = `DELETE FROM ` + t + ` WHERE k = ? AND v = ?`
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
	sk, err := metadata.CheckArgs(ctx, key)
	if err != nil {
		return "", false, err
	}
	var v []byte
	err = s.db.QueryRowContext(ctx, s.getSQL, []byte(sk)).Scan(&v)
	if errors.Is(err, sql.ErrNoRows) {
		return "", false, nil
	}
	if err != nil {
		return "", false, fmt.Errorf("metadata: mysql get: %w", err)
	}
	return string(v), true, nil
}

// PutIfAbsent implements metadata.Store: the INSERT either stores the
// value or fails on the primary key (error 1062), and then the value
// already stored is read; a value removed in between is tried again.
func (s *Store) PutIfAbsent(ctx context.Context, key, value string) (string, bool, error) {
	sk, err := metadata.CheckArgs(ctx, key, value)
	if err != nil {
		return "", false, err
	}
	for {
		_, err := s.db.ExecContext(ctx, s.putSQL, []byte(sk), []byte(value))
		if err == nil {
			return "", true, nil
		}
		var me *mysql.MySQLError
		if !errors.As(err, &me) || me.Number != 1062 {
			return "", false, fmt.Errorf("metadata: mysql put-if-absent: %w", err)
		}
		var v []byte
		err = s.db.QueryRowContext(ctx, s.getSQL, []byte(sk)).Scan(&v)
		if errors.Is(err, sql.ErrNoRows) {
			if err := ctx.Err(); err != nil {
				return "", false, err
			}
			continue
		}
		if err != nil {
			return "", false, fmt.Errorf("metadata: mysql put-if-absent: %w", err)
		}
		return string(v), false, nil
	}
}

// Replace implements metadata.Store.
func (s *Store) Replace(ctx context.Context, key, old, new string) (bool, error) {
	sk, err := metadata.CheckArgs(ctx, key, old, new)
	if err != nil {
		return false, err
	}
	res, err := s.db.ExecContext(ctx, s.replaceSQL, []byte(new), []byte(sk), []byte(old))
	if err != nil {
		return false, fmt.Errorf("metadata: mysql replace: %w", err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return false, fmt.Errorf("metadata: mysql replace: %w", err)
	}
	if n == 1 {
		return true, nil
	}
	if old != new {
		return false, nil
	}
	// The same value in the same microsecond changes no row: say
	// whether it matched.
	var same bool
	if err := s.db.QueryRowContext(ctx, s.sameSQL, []byte(sk), []byte(old)).Scan(&same); err != nil {
		return false, fmt.Errorf("metadata: mysql replace: %w", err)
	}
	return same, nil
}

// Remove implements metadata.Remover.
func (s *Store) Remove(ctx context.Context, key, value string) (bool, error) {
	sk, err := metadata.CheckArgs(ctx, key, value)
	if err != nil {
		return false, err
	}
	res, err := s.db.ExecContext(ctx, s.removeSQL, []byte(sk), []byte(value))
	if err != nil {
		return false, fmt.Errorf("metadata: mysql remove: %w", err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return false, fmt.Errorf("metadata: mysql remove: %w", err)
	}
	return n == 1, nil
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
