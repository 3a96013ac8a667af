// Package metasql is the metadata stores' logic on SQL, written once for
// SQLite, PostgreSQL and MySQL/MariaDB: Get, PutIfAbsent, Replace and
// Remove over one table of keys and values. A backend gives its
// statements and the few behaviours its database differs in (Dialect);
// the table's creation and checks stay in the backend.
package metasql

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/acemq/msgaudit/internal/sqldb"
	"github.com/acemq/msgaudit/metadata"
)

// Dialect is what differs between the SQL metadata backends. Every
// statement takes the key and values as bytes.
type Dialect struct {
	// Name goes into errors: "metadata: <Name> get: …".
	Name string
	// Get selects the value of key ($1).
	Get string
	// Insert inserts key ($1) and value ($2) unless the key is there: it
	// changes no row (ON CONFLICT DO NOTHING) or fails with an error
	// Duplicate recognises. Unused when PutReturning is set.
	Insert string
	// PutReturning, when set, is one statement that inserts key ($1) and
	// value ($2) unless the key is there and returns (true, value) when it
	// inserted, (false, the value there) when the key was there, or no
	// row when a concurrent insert committed meanwhile (tried again).
	PutReturning string
	// Replace sets the value to new ($1) where key ($2) holds old ($3).
	Replace string
	// Same, when set, tells whether key ($1) holds value ($2): asked when
	// Replace of a value by itself changed no row, as on MySQL, which
	// counts changed rows, not matched ones.
	Same string
	// Remove deletes key ($1) where it holds value ($2).
	Remove string
	// Duplicate reports whether Insert failed because the key is there
	// (nil: Insert never fails so).
	Duplicate func(error) bool
	// Explain adds what the database's error means, or returns it as is
	// (nil: as is).
	Explain func(error) error
}

// Store is a metadata.Store on one SQL table.
type Store struct {
	db sqldb.DB
	d  Dialect
}

// New returns a Store running d's statements on db.
func New(db sqldb.DB, d Dialect) *Store { return &Store{db: db, d: d} }

func (s *Store) fail(op string, err error) error {
	if s.d.Explain != nil {
		err = s.d.Explain(err)
	}
	return fmt.Errorf("metadata: %s %s: %w", s.d.Name, op, err)
}

// Get implements metadata.Store.
func (s *Store) Get(ctx context.Context, key string) (string, bool, error) {
	sk, err := metadata.CheckArgs(ctx, key)
	if err != nil {
		return "", false, err
	}
	v, ok, err := s.get(ctx, sk)
	if err != nil {
		return "", false, s.fail("get", err)
	}
	return v, ok, nil
}

func (s *Store) get(ctx context.Context, sk string) (string, bool, error) {
	var v []byte
	err := s.db.QueryRow(ctx, s.d.Get, []byte(sk)).Scan(&v)
	if errors.Is(err, sql.ErrNoRows) {
		return "", false, nil
	}
	if err != nil {
		return "", false, err
	}
	return string(v), true, nil
}

// PutIfAbsent implements metadata.Store: the insert either stores the
// value or finds the key there, and then the value already stored is
// read; a value removed in between is tried again.
func (s *Store) PutIfAbsent(ctx context.Context, key, value string) (string, bool, error) {
	sk, err := metadata.CheckArgs(ctx, key, value)
	if err != nil {
		return "", false, err
	}
	for {
		prev, stored, found, err := s.put(ctx, sk, value)
		if err != nil {
			return "", false, s.fail("put-if-absent", err)
		}
		if stored {
			return "", true, nil
		}
		if found {
			return prev, false, nil
		}
		// The row went away between the insert and the read (a Remove),
		// or a concurrent insert committed after the statement's snapshot:
		// the next try sees it.
		if err := ctx.Err(); err != nil {
			return "", false, err
		}
	}
}

// put tries once: stored, or found with the value there, or neither.
func (s *Store) put(ctx context.Context, sk, value string) (prev string, stored, found bool, err error) {
	if s.d.PutReturning != "" {
		var v []byte
		err := s.db.QueryRow(ctx, s.d.PutReturning, []byte(sk), []byte(value)).Scan(&stored, &v)
		if errors.Is(err, sql.ErrNoRows) {
			return "", false, false, nil
		}
		if err != nil {
			return "", false, false, err
		}
		return string(v), stored, !stored, nil
	}
	n, err := s.db.Exec(ctx, s.d.Insert, []byte(sk), []byte(value))
	if err != nil && (s.d.Duplicate == nil || !s.d.Duplicate(err)) {
		return "", false, false, err
	}
	if err == nil && n == 1 {
		return "", true, false, nil
	}
	prev, found, err = s.get(ctx, sk)
	return prev, false, found, err
}

// Replace implements metadata.Store.
func (s *Store) Replace(ctx context.Context, key, old, new string) (bool, error) {
	sk, err := metadata.CheckArgs(ctx, key, old, new)
	if err != nil {
		return false, err
	}
	n, err := s.db.Exec(ctx, s.d.Replace, []byte(new), []byte(sk), []byte(old))
	if err != nil {
		return false, s.fail("replace", err)
	}
	if n == 1 {
		return true, nil
	}
	if old != new || s.d.Same == "" {
		return false, nil
	}
	// The same value changed no row: say whether it matched.
	var same bool
	if err := s.db.QueryRow(ctx, s.d.Same, []byte(sk), []byte(old)).Scan(&same); err != nil {
		return false, s.fail("replace", err)
	}
	return same, nil
}

// Remove implements metadata.Remover.
func (s *Store) Remove(ctx context.Context, key, value string) (bool, error) {
	sk, err := metadata.CheckArgs(ctx, key, value)
	if err != nil {
		return false, err
	}
	n, err := s.db.Exec(ctx, s.d.Remove, []byte(sk), []byte(value))
	if err != nil {
		return false, s.fail("remove", err)
	}
	return n == 1, nil
}
