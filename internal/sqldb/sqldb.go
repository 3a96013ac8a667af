// Package sqldb is the one view of a database that the SQL backends'
// shared cores run their statements through, whichever driver the
// application brought: database/sql (Std) or a pgx pool (package pgxdb).
// A backend's core is written once against DB; only the statements and
// the few behaviours the dialects disagree on stay per backend.
package sqldb

import (
	"context"
	"database/sql"
)

// Row is one result row: *sql.Row and pgx.Row both are one. A row that is
// not there scans as an error matching sql.ErrNoRows (pgx's ErrNoRows
// matches it too).
type Row interface {
	Scan(dest ...any) error
}

// DB runs one statement, each in its own transaction (autocommit).
type DB interface {
	// QueryRow runs q and returns its first row.
	QueryRow(ctx context.Context, q string, args ...any) Row
	// Exec runs q and returns the number of rows it changed.
	Exec(ctx context.Context, q string, args ...any) (int64, error)
}

// Std returns db as a DB.
func Std(db *sql.DB) DB { return std{db} }

type std struct{ db *sql.DB }

func (d std) QueryRow(ctx context.Context, q string, args ...any) Row {
	return d.db.QueryRowContext(ctx, q, args...)
}

func (d std) Exec(ctx context.Context, q string, args ...any) (int64, error) {
	res, err := d.db.ExecContext(ctx, q, args...)
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}
