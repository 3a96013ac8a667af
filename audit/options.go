package audit

import (
	"fmt"

	"github.com/acemq/msgaudit/bitsetbin"
)

// Sighting is the outcome of one check: FirstSeen, Duplicate or TooOld
// (the type of bitsetbin, under the same names).
type Sighting = bitsetbin.Sighting

const (
	// FirstSeen means the id was not seen before (or was rolled back) and
	// is now recorded.
	FirstSeen = bitsetbin.FirstSeen
	// Duplicate means the id was recorded before and not rolled back.
	Duplicate = bitsetbin.Duplicate
	// TooOld means nothing was recorded and the audit cannot tell: the
	// sequence lies below the producer's window. The methods that cannot
	// return an error (CheckKey) also return TooOld for a key they reject.
	TooOld = bitsetbin.TooOld
)

const (
	// DefaultDepth is the window depth used when Options.Depth is 0: every
	// sequence within DefaultDepth of a producer's highest sequence is
	// tracked exactly.
	DefaultDepth = bitsetbin.DefaultDepth
	// DefaultMaxProducers is the producer cap used when
	// Options.MaxProducers is 0 (ActiveMQ's MAXIMUM_PRODUCER_COUNT).
	DefaultMaxProducers = 64
	// MaxProducersLimit is the largest accepted producer cap.
	MaxProducersLimit = 1 << 20
	// DefaultMaxIDLength is the id length limit used when
	// Options.MaxIDLength is 0. Longer ids are rejected with an error
	// wrapping msgid.ErrTooLong and are never stored.
	DefaultMaxIDLength = 1024
)

// Options configures an audit. The zero value means the defaults: depth
// 2048, 64 producers, ids up to 1024 bytes. There is deliberately no value
// meaning "track nothing": MaxProducers 0 is the default cap, not ActiveMQ's
// producer cap 0, which silently disables the audit (every new producer
// evicts itself).
type Options struct {
	// Depth is the guaranteed window depth per producer: a sequence at most
	// Depth below the producer's highest sequence is always classified
	// exactly. 0 means DefaultDepth; it must not exceed bitsetbin.MaxDepth.
	Depth int
	// MaxProducers is the number of producers tracked at once; the least
	// recently used producer is evicted (with its whole window) when a new
	// one arrives. 0 means DefaultMaxProducers; at most MaxProducersLimit.
	MaxProducers int
	// MaxIDLength is the longest id (or producer key) accepted. 0 means
	// DefaultMaxIDLength.
	MaxIDLength int
	// OnEvict, if not nil, is called once per evicted producer with its key
	// and whether it was recent: touched by a check within the last Depth
	// checks of the audit (of its shard, for Sharded). Recent evictions mean
	// the cap is too small or a producer-key flood is under way: their
	// duplicates will pass. Locked and Sharded call it after releasing their
	// locks, so it may call back into the audit. Clear, UnmarshalBinary and
	// SetMaxProducers report no evictions except those of SetMaxProducers.
	OnEvict func(key string, recent bool)
}

// config is Options with the defaults applied and the limits checked.
type config struct {
	depth, maxProducers, maxIDLength int
	onEvict                          func(string, bool)
}

func (o Options) config() (config, error) {
	d, err := checkDepth(o.Depth)
	if err != nil {
		return config{}, err
	}
	n, err := checkMaxProducers(o.MaxProducers)
	if err != nil {
		return config{}, err
	}
	l := o.MaxIDLength
	switch {
	case l < 0:
		return config{}, fmt.Errorf("%w: MaxIDLength %d < 0", ErrOptions, l)
	case l == 0:
		l = DefaultMaxIDLength
	}
	return config{depth: d, maxProducers: n, maxIDLength: l, onEvict: o.OnEvict}, nil
}

func checkDepth(d int) (int, error) {
	switch {
	case d < 0:
		return 0, fmt.Errorf("%w: depth %d < 0", ErrOptions, d)
	case d > bitsetbin.MaxDepth:
		return 0, fmt.Errorf("%w: depth %d > %d", ErrOptions, d, bitsetbin.MaxDepth)
	case d == 0:
		return DefaultDepth, nil
	}
	return d, nil
}

func checkMaxProducers(n int) (int, error) {
	switch {
	case n < 0:
		return 0, fmt.Errorf("%w: max producers %d < 0", ErrOptions, n)
	case n > MaxProducersLimit:
		return 0, fmt.Errorf("%w: max producers %d > %d", ErrOptions, n, MaxProducersLimit)
	case n == 0:
		return DefaultMaxProducers, nil
	}
	return n, nil
}

// Stats are the counters of an audit since it was created. Clear and
// UnmarshalBinary keep them; they count what this process saw.
type Stats struct {
	// Checks counts Check, CheckKey and IsDuplicate calls, including
	// rejected ids.
	Checks uint64
	// FirstSeen, Duplicates and TooOld count the sightings of accepted checks.
	FirstSeen, Duplicates, TooOld uint64
	// Malformed counts ids (or CheckKey keys) rejected as malformed by any
	// method; TooLong those rejected for exceeding MaxIDLength.
	Malformed, TooLong uint64
	// Evictions counts producers dropped to make room (LRU or a shrinking
	// SetMaxProducers); RecentEvictions those of them touched by a check
	// within the last Depth checks (see Options.OnEvict).
	Evictions, RecentEvictions uint64
	// Rollbacks counts rollbacks that cleared a recorded id.
	Rollbacks uint64
	// Producers is the number of producers tracked now.
	Producers int
}

// add accumulates s2 into s (used to sum the shards of a Sharded audit).
func (s *Stats) add(s2 Stats) {
	s.Checks += s2.Checks
	s.FirstSeen += s2.FirstSeen
	s.Duplicates += s2.Duplicates
	s.TooOld += s2.TooOld
	s.Malformed += s2.Malformed
	s.TooLong += s2.TooLong
	s.Evictions += s2.Evictions
	s.RecentEvictions += s2.RecentEvictions
	s.Rollbacks += s2.Rollbacks
	s.Producers += s2.Producers
}
