package sqlitestore

import (
	"context"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
)

// stmt is a statement prepared once on the store's driver connection and
// run through the driver interfaces directly, without database/sql's
// per-call wrappers (Rows, Result, argument conversion). It may be used
// only inside Store.run, which holds the connection.
type stmt struct {
	ds interface {
		driver.Stmt
		driver.StmtExecContext
		driver.StmtQueryContext
	}
	s *Store
}

// prepare prepares query on the driver connection dc.
func (s *Store) prepare(ctx context.Context, dc any, query string) (*stmt, error) {
	pc, ok := dc.(driver.ConnPrepareContext)
	if !ok {
		return nil, fmt.Errorf("driver connection %T cannot prepare with a context", dc)
	}
	ds, err := pc.PrepareContext(ctx, query)
	if err != nil {
		return nil, err
	}
	st, ok := ds.(interface {
		driver.Stmt
		driver.StmtExecContext
		driver.StmtQueryContext
	})
	if !ok {
		_ = ds.Close()
		return nil, fmt.Errorf("driver statement %T lacks the context methods", ds)
	}
	return &stmt{ds: st, s: s}, nil
}

// bind puts args into the store's reused argument buffer.
func (p *stmt) bind(args []any) []driver.NamedValue {
	a := p.s.args[:len(args)]
	for i, v := range args {
		a[i] = driver.NamedValue{Ordinal: i + 1, Value: v}
	}
	return a
}

// exec runs the statement and returns the number of rows it changed.
func (p *stmt) exec(ctx context.Context, args ...any) (int64, error) {
	r, err := p.ds.ExecContext(ctx, p.bind(args))
	clear(p.s.args[:len(args)])
	if err != nil {
		return 0, err
	}
	return r.RowsAffected()
}

// errNoRow is queryRow's answer for a query that returned no row.
var errNoRow = errors.New("no row")

// queryRow runs the statement and returns the first column of its first
// row, or errNoRow.
func (p *stmt) queryRow(ctx context.Context, args ...any) (driver.Value, error) {
	rows, err := p.ds.QueryContext(ctx, p.bind(args))
	clear(p.s.args[:len(args)])
	if err != nil {
		return nil, err
	}
	dest := p.s.dest[:]
	err = rows.Next(dest)
	v := dest[0]
	dest[0] = nil
	if cerr := rows.Close(); err == nil {
		err = cerr
	}
	switch {
	case errors.Is(err, io.EOF):
		return nil, errNoRow
	case err != nil:
		return nil, err
	}
	return v, nil
}

// text returns a TEXT column's value as a string.
func text(v driver.Value) (string, error) {
	switch v := v.(type) {
	case string:
		return v, nil
	case []byte:
		return string(v), nil
	}
	return "", fmt.Errorf("column value %T, want text", v)
}

// run holds the store's connection (or gives up when ctx ends, or returns
// ErrClosed) and calls f with the driver connection available to the
// store's statements.
func (s *Store) run(ctx context.Context, f func() error) error {
	if err := s.lock(ctx); err != nil {
		return err
	}
	defer s.unlock()
	s.body = f
	err := s.conn.Raw(s.raw)
	s.body = nil
	return err
}
