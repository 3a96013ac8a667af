package audit

import (
	"sync"

	"github.com/acemq/msgaudit/msgid"
)

// Locked is an Audit behind one mutex: safe for concurrent use, with every
// method (reads included) holding the lock. Options.OnEvict runs after the
// lock is released. Use Sharded when many goroutines check ids of many
// producers at once.
type Locked struct {
	mu sync.Mutex
	a  *Audit
}

// NewLocked returns an empty locked audit configured by o.
func NewLocked(o Options) (*Locked, error) {
	a, err := New(o)
	if err != nil {
		return nil, err
	}
	return &Locked{a: a}, nil
}

// unlock releases the lock and then reports the evictions the call made.
func (l *Locked) unlock() {
	if len(l.a.pending) == 0 {
		l.mu.Unlock()
		return
	}
	evs := l.a.takePending()
	l.mu.Unlock()
	report(l.a.cfg.onEvict, evs)
}

// Check is Audit.Check under the lock. The id is parsed before the lock is
// taken.
func (l *Locked) Check(id string) (Sighting, error) {
	if len(id) > l.a.cfg.maxIDLength { // immutable after New
		l.mu.Lock()
		_, _, err := l.a.reject(id)
		l.mu.Unlock()
		return TooOld, err
	}
	key, seq, err := msgid.Split(id)
	if err != nil {
		l.mu.Lock()
		l.a.st.checks++
		l.a.st.malformed++
		l.mu.Unlock()
		return TooOld, err
	}
	l.mu.Lock()
	l.a.st.checks++
	if e, found := l.a.lru.Get(key); found {
		v := l.a.mark(e, seq)
		l.mu.Unlock()
		return v, nil
	}
	v, _ := l.a.checkMiss(key, seq, false)
	l.unlock()
	return v, nil
}

// CheckKey is Audit.CheckKey under the lock.
func (l *Locked) CheckKey(key string, seq uint64) Sighting {
	l.mu.Lock()
	v, _ := l.a.checkKey(key, seq)
	l.unlock()
	return v
}

// IsDuplicate is Audit.IsDuplicate under the lock.
func (l *Locked) IsDuplicate(id string) bool {
	v, err := l.Check(id)
	return err == nil && v == Duplicate
}

// Rollback is Audit.Rollback under the lock.
func (l *Locked) Rollback(id string) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.a.Rollback(id)
}

// RollbackKey is Audit.RollbackKey under the lock.
func (l *Locked) RollbackKey(key string, seq uint64) {
	l.mu.Lock()
	l.a.RollbackKey(key, seq)
	l.mu.Unlock()
}

// IsInOrder is Audit.IsInOrder under the lock.
func (l *Locked) IsInOrder(id string) (bool, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.a.IsInOrder(id)
}

// LastSeq is Audit.LastSeq under the lock.
func (l *Locked) LastSeq(key string) (uint64, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.a.LastSeq(key)
}

// Clear is Audit.Clear under the lock.
func (l *Locked) Clear() {
	l.mu.Lock()
	l.a.Clear()
	l.mu.Unlock()
}

// Len is Audit.Len under the lock.
func (l *Locked) Len() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.a.Len()
}

// Depth is Audit.Depth under the lock.
func (l *Locked) Depth() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.a.Depth()
}

// MaxProducers is Audit.MaxProducers under the lock.
func (l *Locked) MaxProducers() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.a.MaxProducers()
}

// SetDepth is Audit.SetDepth under the lock.
func (l *Locked) SetDepth(d int) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.a.SetDepth(d)
}

// SetMaxProducers is Audit.SetMaxProducers under the lock; OnEvict runs
// after the lock is released.
func (l *Locked) SetMaxProducers(n int) error {
	n, err := checkMaxProducers(n)
	if err != nil {
		return err
	}
	l.mu.Lock()
	l.a.setMaxProducers(n)
	l.unlock()
	return nil
}

// Stats is Audit.Stats under the lock: a consistent snapshot.
func (l *Locked) Stats() Stats {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.a.Stats()
}

// MarshalBinary is Audit.MarshalBinary under the lock.
func (l *Locked) MarshalBinary() ([]byte, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.a.MarshalBinary()
}

// UnmarshalBinary decodes the snapshot outside the lock, then swaps it in
// under the lock; on error the audit is unchanged.
func (l *Locked) UnmarshalBinary(data []byte) error {
	l.mu.Lock()
	cfg := l.a.cfg
	l.mu.Unlock()
	fresh, err := decode(data, cfg, nil)
	if err != nil {
		return err
	}
	l.mu.Lock()
	l.a.swap(fresh)
	l.mu.Unlock()
	return nil
}
