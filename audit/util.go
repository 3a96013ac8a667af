package audit

import (
	"errors"
	"sync/atomic"

	"github.com/acemq/msgaudit/msgid"
)

func isTooLong(err error) bool { return errors.Is(err, msgid.ErrTooLong) }

// budget is the producer cap shared by the shards of a Sharded audit:
// inUse counts tracked producers plus slots taken from another shard and
// not yet inserted. It is only changed under some shard's lock.
type budget struct {
	inUse atomic.Int64
	cap   atomic.Int64
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
