package audit

import (
	"errors"
	"sync/atomic"

	"github.com/acemq/msgaudit/msgid"
)

func isTooLong(err error) bool { return errors.Is(err, msgid.ErrTooLong) }

// budget is the producer cap shared by the shards of a Sharded audit:
// inUse counts tracked producers plus slots freed for a caller that has not
// inserted yet. It is only changed under some shard's lock. clock is twice
// the number of inserts: an inserted producer is stamped with it (even),
// and a checked one with it plus one (odd, so a producer checked after an
// insert is newer than that insert), so the shards can tell whose least
// recently used producer is oldest. All three are
// written only when a producer is inserted or evicted, so checks of tracked
// producers only read this cache line.
type budget struct {
	_     [64]byte
	inUse atomic.Int64
	cap   atomic.Int64
	clock atomic.Uint64
	// dir is the Sharded audit's directory (nil with one shard): an
	// evicted producer is removed from it.
	dir *directory
	_   [64]byte
}

// take reserves a slot if one is free.
func (b *budget) take() bool {
	for {
		u := b.inUse.Load()
		if u >= b.cap.Load() {
			return false
		}
		if b.inUse.CompareAndSwap(u, u+1) {
			return true
		}
	}
}

func (b *budget) release() { b.inUse.Add(-1) }

func splitLimit(id string, limit int) (string, uint64, error) {
	return msgid.SplitLimit(id, limit)
}
