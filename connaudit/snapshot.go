package connaudit

import (
	"cmp"
	"encoding/binary"
	"fmt"
	"slices"

	"github.com/acemq/msgaudit/audit"
	"github.com/acemq/msgaudit/internal/snapframe"
)

// Snapshot format, version 1 (uvarint = encoding/binary Uvarint):
//
//	magic   "MSGC"
//	version 1 byte = 1
//	depth, maxProducers, maxIDLength, maxDestinations, maxConsumers, shards
//	        uvarint each (the settings; 0 = default)
//	queues  uvarint count, then count times, least recently used first:
//	          kind 1 byte, nameLen uvarint, name, auditLen uvarint, audit
//	topics  uvarint count, then count times, least recently used first:
//	          consumerLen uvarint, consumer, kind 1 byte, nameLen uvarint,
//	          name, auditLen uvarint, audit
//	crc     uint32 little endian, CRC-32C of everything before it
//
// where audit is an audit snapshot (audit.Locked.MarshalBinary). The
// enabled switch and the counters are not part of a snapshot.
const (
	snapMagic   = "MSGC"
	snapVersion = 1
	// maxNameLen bounds destination and consumer names in a snapshot.
	maxNameLen = 1 << 16
	// minQueueRecord is the smallest queue record: kind, a one-byte name
	// and its length, an audit length and the smallest audit snapshot.
	minQueueRecord = 1 + 1 + 1 + 1 + minAuditSnapshot
	// minAuditSnapshot is the size of an empty audit snapshot's header
	// (magic, version, three one-byte varints, checksum).
	minAuditSnapshot = 4 + 1 + 3 + 4
)

type entry[K any] struct {
	key  K
	used uint64
	au   auditor
}

// sortedEntries lists a table least recently used first; ties (audits
// used since the same creation) are ordered by key so that the encoding of
// a given state is deterministic.
func sortedEntries[K comparable](m map[K]*slot, less func(a, b K) int) []entry[K] {
	es := make([]entry[K], 0, len(m))
	for k, s := range m {
		es = append(es, entry[K]{k, s.used.Load(), s.au})
	}
	slices.SortFunc(es, func(a, b entry[K]) int {
		return cmp.Or(cmp.Compare(a.used, b.used), less(a.key, b.key))
	})
	return es
}

func compareDest(a, b Destination) int {
	return cmp.Or(cmp.Compare(a.Kind, b.Kind), cmp.Compare(a.Name, b.Name))
}

func compareTopicKey(a, b topicKey) int {
	return cmp.Or(cmp.Compare(a.consumer, b.consumer), compareDest(a.dest, b.dest))
}

func appendString(dst []byte, s string) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(s)))
	return append(dst, s...)
}

func appendAudit(dst []byte, au auditor) ([]byte, error) {
	b, err := au.MarshalBinary()
	if err != nil {
		return nil, err
	}
	dst = binary.AppendUvarint(dst, uint64(len(b)))
	return append(dst, b...), nil
}

// MarshalBinary encodes the settings and every queue and topic audit
// (least recently used first) so that a restarted consumer can restore the
// connection audit with UnmarshalBinary. Audits are not created or dropped
// while it runs; checks continue, and each audit is encoded consistently.
func (a *Audit) MarshalBinary() ([]byte, error) {
	a.lockTables()
	defer a.unlockTables()
	a.mu.Lock()
	cfg := a.cfg
	a.mu.Unlock()
	dst := snapframe.Begin(nil, snapMagic, snapVersion)
	for _, v := range []int{cfg.depth, cfg.maxProducers, cfg.maxIDLength, cfg.maxDestinations, cfg.maxConsumers, cfg.shards} {
		dst = binary.AppendUvarint(dst, uint64(v))
	}
	queues := sortedEntries(a.queues.all(), compareDest)
	dst = binary.AppendUvarint(dst, uint64(len(queues)))
	var err error
	for _, e := range queues {
		dst = append(dst, byte(e.key.Kind))
		dst = appendString(dst, e.key.Name)
		if dst, err = appendAudit(dst, e.au); err != nil {
			return nil, err
		}
	}
	topics := sortedEntries(a.topics.all(), compareTopicKey)
	dst = binary.AppendUvarint(dst, uint64(len(topics)))
	for _, e := range topics {
		dst = appendString(dst, e.key.consumer)
		dst = append(dst, byte(e.key.dest.Kind))
		dst = appendString(dst, e.key.dest.Name)
		if dst, err = appendAudit(dst, e.au); err != nil {
			return nil, err
		}
	}
	return snapframe.Seal(dst, 0), nil
}

// within returns an error wrapping ErrCorrupt if any limit of c (a
// snapshot's settings) exceeds that of limits (the receiving audit's), with
// the defaults applied to both.
func (c settings) within(limits settings) error {
	for _, l := range []struct {
		name           string
		got, have, def int
	}{
		{"Depth", c.depth, limits.depth, audit.DefaultDepth},
		{"MaxProducers", c.maxProducers, limits.maxProducers, audit.DefaultMaxProducers},
		{"MaxIDLength", c.maxIDLength, limits.maxIDLength, audit.DefaultMaxIDLength},
		{"MaxDestinations", c.maxDestinations, limits.maxDestinations, defaultMaxDestinations},
		{"MaxConsumers", c.maxConsumers, limits.maxConsumers, defaultMaxConsumers},
	} {
		got, have := cmp.Or(l.got, l.def), cmp.Or(l.have, l.def)
		if got > have {
			return fmt.Errorf("%w: %s %d above the audit's %d (a snapshot never raises a limit)", ErrCorrupt, l.name, got, have)
		}
	}
	return nil
}

// reader is a snapshot body cursor with the package's own decoders.
type reader struct{ *snapframe.Reader }

func (r *reader) bytes(what string, minLen int, maxLen uint64) []byte {
	n := r.Uvarint(what + " length")
	if r.Err != nil {
		return nil
	}
	if n < uint64(minLen) || n > maxLen || n > uint64(len(r.B)) {
		r.Fail("%s of %d bytes (%d left)", what, n, len(r.B))
		return nil
	}
	p := r.B[:n]
	r.B = r.B[n:]
	return p
}

func (r *reader) kind(queue bool) Kind {
	k := Kind(r.Byte("kind"))
	if r.Err == nil && (!k.Valid() || (Destination{Kind: k}).IsQueue() != queue) {
		r.Fail("kind %d in the %s table", k, map[bool]string{true: "queue", false: "topic"}[queue])
	}
	return k
}

func (r *reader) audit(cfg settings) auditor {
	b := r.bytes("audit", minAuditSnapshot, uint64(len(r.B)))
	if r.Err != nil {
		return nil
	}
	au := newAuditor(cfg)
	if err := au.UnmarshalBinary(b); err != nil {
		r.Err = fmt.Errorf("%w: %w", ErrCorrupt, err)
		return nil
	}
	return au
}

// UnmarshalBinary replaces the settings and every audit with those of a
// snapshot made by MarshalBinary. A snapshot restores state within the
// connection audit's limits and never raises them: one whose Depth,
// MaxProducers, MaxIDLength, MaxDestinations or MaxConsumers exceeds the
// audit's current one (defaults applied), or that holds a destination audit
// deeper or with a larger producer cap, is refused; within them the
// snapshot's (lower) settings are adopted. The restored audits keep the
// receiving audit's Shards, whatever the snapshot says. Every count and
// length is checked against the bytes present before anything is allocated
// for it; on any error (wrapping ErrCorrupt) the connection audit is left
// unchanged. The enabled switch is kept; the counters of the replaced
// audits are kept in Stats.
func (a *Audit) UnmarshalBinary(data []byte) error {
	fr, err := snapframe.Open(data, snapMagic, snapVersion, len(snapMagic)+1+6+2+4, ErrCorrupt)
	if err != nil {
		return err
	}
	r := reader{fr}
	var vals [6]uint64
	for i := range vals {
		vals[i] = r.Uvarint("setting")
		if vals[i] > 1<<31-1 { // keeps the int conversions safe; settings() checks the ranges
			r.Fail("setting %d out of range", vals[i])
		}
	}
	if r.Err != nil {
		return r.Err
	}
	o := Options{Depth: int(vals[0]), MaxProducers: int(vals[1]), MaxIDLength: int(vals[2]),
		MaxDestinations: int(vals[3]), MaxConsumers: int(vals[4]), Shards: int(vals[5])}
	cfg, err := o.settings()
	if err != nil {
		return fmt.Errorf("%w: %w", ErrCorrupt, err)
	}
	a.mu.Lock()
	limits := a.cfg
	a.mu.Unlock()
	if err := cfg.within(limits); err != nil {
		return err
	}
	// The shard count is the receiving audit's: a layout, not state, and
	// what each restored audit costs before it holds anything.
	cfg.shards = limits.shards
	queues := newTable[Destination](cfg.maxDestinations)
	topics := newTable[topicKey](cfg.maxConsumers)
	qm, tm := *queues.m.Load(), *topics.m.Load()
	var epoch uint64

	n := r.Uvarint("queue count")
	if r.Err == nil && (n > uint64(cfg.maxDestinations) || n > uint64(len(r.B)/minQueueRecord)) {
		r.Fail("%d queue audits in %d bytes (cap %d)", n, len(r.B), cfg.maxDestinations)
	}
	for i := uint64(0); i < n && r.Err == nil; i++ {
		k := r.kind(true)
		name := r.bytes("queue name", 1, maxNameLen)
		au := r.audit(cfg)
		if r.Err != nil {
			break
		}
		d := Destination{Kind: k, Name: string(name)}
		if _, dup := qm[d]; dup {
			r.Fail("queue %q twice", trunc(d.Name))
			break
		}
		epoch += 2
		s := &slot{au: au}
		s.used.Store(epoch)
		qm[d] = s
	}
	n = r.Uvarint("topic count")
	if r.Err == nil && (n > uint64(cfg.maxConsumers) || n > uint64(len(r.B)/(minQueueRecord+1))) {
		r.Fail("%d topic audits in %d bytes (cap %d)", n, len(r.B), cfg.maxConsumers)
	}
	for i := uint64(0); i < n && r.Err == nil; i++ {
		consumer := r.bytes("consumer", 0, maxNameLen)
		k := r.kind(false)
		name := r.bytes("topic name", 1, maxNameLen)
		au := r.audit(cfg)
		if r.Err != nil {
			break
		}
		key := topicKey{consumer: string(consumer), dest: Destination{Kind: k, Name: string(name)}}
		if _, dup := tm[key]; dup {
			r.Fail("topic %q of consumer %q twice", trunc(key.dest.Name), trunc(key.consumer))
			break
		}
		epoch += 2
		s := &slot{au: au}
		s.used.Store(epoch)
		tm[key] = s
	}
	if r.Err != nil {
		return r.Err
	}
	if len(r.B) != 0 {
		return fmt.Errorf("%w: %d trailing bytes", ErrCorrupt, len(r.B))
	}

	a.lockTables()
	defer a.unlockTables()
	var old []auditor
	for _, s := range a.queues.all() {
		old = append(old, s.au)
	}
	for _, s := range a.topics.all() {
		old = append(old, s.au)
	}
	// Keep the epochs increasing so restored audits keep their order and
	// are older than anything created afterwards.
	e := max(a.queues.epoch.Load(), a.topics.epoch.Load()) &^ 1
	for _, s := range qm {
		s.used.Store(s.used.Load() + e)
	}
	for _, s := range tm {
		s.used.Store(s.used.Load() + e)
	}
	a.queues.m.Store(&qm)
	a.queues.epoch.Store(e + epoch)
	a.queues.cap = cfg.maxDestinations
	a.topics.m.Store(&tm)
	a.topics.epoch.Store(e + epoch)
	a.topics.cap = cfg.maxConsumers
	a.mu.Lock()
	a.cfg = cfg
	a.mu.Unlock()
	if len(old) != 0 {
		a.retire(false, old...)
	}
	return nil
}
