package receiver

import (
	"sync"
	"time"
)

// inflight is the set of deliveries inside Process, each with the time it
// entered, for the InFlight and OldestInFlight gauges. Its map is
// created on first use and keeps its capacity, so a delivery allocates
// nothing once it has grown to the usual number in flight.
type inflight struct {
	mu     sync.Mutex
	next   uint64
	starts map[uint64]time.Time // id → entry, with its monotonic reading
}

// begin records a delivery entering at now and returns its id.
func (s *inflight) begin(now time.Time) uint64 {
	s.mu.Lock()
	if s.starts == nil {
		s.starts = make(map[uint64]time.Time)
	}
	s.next++
	id := s.next
	s.starts[id] = now
	s.mu.Unlock()
	return id
}

// end removes the delivery id.
func (s *inflight) end(id uint64) {
	s.mu.Lock()
	delete(s.starts, id)
	s.mu.Unlock()
}

// read returns how many deliveries are in flight and how long the oldest
// of them has been, at now (0 with none).
func (s *inflight) read(now time.Time) (n int, oldest time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var first time.Time
	for _, t := range s.starts {
		if first.IsZero() || t.Before(first) {
			first = t
		}
	}
	if len(s.starts) > 0 {
		oldest = max(now.Sub(first), 0)
	}
	return len(s.starts), oldest
}
