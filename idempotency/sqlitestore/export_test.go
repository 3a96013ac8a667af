package sqlitestore

import (
	"context"
	"fmt"
)

// ConnSynchronous returns the synchronous value (SQLite's number: 0 off,
// 1 normal, 2 full, 3 extra) that each connection of s's pool runs with,
// read with PRAGMA synchronous on the connection itself. The store holds
// its one connection for its lifetime; the pool may open no other, which
// is checked, so the list is every connection there is.
func ConnSynchronous(ctx context.Context, s *Store) ([]int, error) {
	if n := s.db.Stats().MaxOpenConnections; n != 1 {
		return nil, fmt.Errorf("pool allows %d connections; read each one's synchronous setting here", n)
	}
	if err := s.lock(ctx); err != nil {
		return nil, err
	}
	defer s.unlock()
	var v int
	if err := s.conn.QueryRowContext(ctx, "PRAGMA synchronous").Scan(&v); err != nil {
		return nil, err
	}
	if n := s.db.Stats().OpenConnections; n != 1 {
		return nil, fmt.Errorf("%d open connections, want the store's one", n)
	}
	return []int{v}, nil
}

// PurgeDone is closed once s's automatic purge goroutine has returned.
func PurgeDone(s *Store) <-chan struct{} { return s.purger.Done() }
