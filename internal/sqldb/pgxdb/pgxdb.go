// Package pgxdb runs the SQL backends' shared cores (see package sqldb) on
// a pgx pool.
package pgxdb

import (
	"context"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/acemq/msgaudit/internal/sqldb"
)

// Pool returns pool as a sqldb.DB.
func Pool(pool *pgxpool.Pool) sqldb.DB { return db{pool} }

type db struct{ pool *pgxpool.Pool }

func (d db) QueryRow(ctx context.Context, q string, args ...any) sqldb.Row {
	return d.pool.QueryRow(ctx, q, args...)
}

func (d db) Exec(ctx context.Context, q string, args ...any) (int64, error) {
	tag, err := d.pool.Exec(ctx, q, args...)
	return tag.RowsAffected(), err
}
