package metadata

import (
	"context"
	"sync"
)

// Memory is a Store in process memory, for tests and a single process. It
// forgets everything when the process ends. The zero value is not usable;
// call NewMemory.
type Memory struct {
	mu     sync.Mutex
	m      map[string]string
	closed bool
}

var _ StoreCloser = (*Memory)(nil)

// NewMemory returns an empty in-memory store.
func NewMemory() *Memory {
	return &Memory{m: make(map[string]string)}
}

// Get implements Store.
func (s *Memory) Get(ctx context.Context, key string) (string, bool, error) {
	sk, err := check(ctx, key)
	if err != nil {
		return "", false, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return "", false, ErrClosed
	}
	v, ok := s.m[sk]
	return v, ok, nil
}

// PutIfAbsent implements Store.
func (s *Memory) PutIfAbsent(ctx context.Context, key, value string) (string, bool, error) {
	sk, err := check(ctx, key, value)
	if err != nil {
		return "", false, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return "", false, ErrClosed
	}
	if v, ok := s.m[sk]; ok {
		return v, false, nil
	}
	s.m[sk] = value
	return "", true, nil
}

// Replace implements Store.
func (s *Memory) Replace(ctx context.Context, key, old, new string) (bool, error) {
	sk, err := check(ctx, key, old, new)
	if err != nil {
		return false, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return false, ErrClosed
	}
	if v, ok := s.m[sk]; !ok || v != old {
		return false, nil
	}
	s.m[sk] = new
	return true, nil
}

// Remove implements Remover.
func (s *Memory) Remove(ctx context.Context, key, value string) (bool, error) {
	sk, err := check(ctx, key, value)
	if err != nil {
		return false, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return false, ErrClosed
	}
	if v, ok := s.m[sk]; !ok || v != value {
		return false, nil
	}
	delete(s.m, sk)
	return true, nil
}

// Len returns the number of keys stored.
func (s *Memory) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.m)
}

// Close drops the contents; later operations return ErrClosed.
func (s *Memory) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	s.m = nil
	return nil
}
