package audit

import (
	"encoding/binary"
	"fmt"

	"github.com/acemq/msgaudit/bitsetbin"
	"github.com/acemq/msgaudit/internal/snapframe"
)

// Snapshot format, version 1 (all integers unsigned; uvarint = encoding/binary
// Uvarint):
//
//	magic    "MSGA"
//	version  1 byte = 1
//	depth    uvarint   configured window depth
//	cap      uvarint   producer cap
//	count    uvarint   number of producers, <= cap
//	count times, least recently used first:
//	  keyLen uvarint, key [keyLen]byte
//	  window  bitsetbin's encoding (it knows its own length)
//	crc      uint32 little endian, CRC-32C of everything before it
//
// A window costs about depth/8 bytes plus its header. The counters (Stats)
// and the configuration that is not state (MaxIDLength, OnEvict) are not
// part of a snapshot.
const (
	snapMagic   = "MSGA"
	snapVersion = 1
	// minRecord is the smallest encoding of one producer: a one-byte key
	// length, a one-byte key and a three-byte unanchored window.
	minRecord = 1 + 1 + 3
)

func appendHeader(dst []byte, depth, maxProducers, count int) []byte {
	dst = snapframe.Begin(dst, snapMagic, snapVersion)
	dst = binary.AppendUvarint(dst, uint64(depth))
	dst = binary.AppendUvarint(dst, uint64(maxProducers))
	return binary.AppendUvarint(dst, uint64(count))
}

// appendProducers appends the producers of a, least recently used first.
func (a *Audit) appendProducers(dst []byte) ([]byte, error) {
	for _, key := range a.lru.Keys() {
		e, _ := a.lru.Peek(key)
		var err error
		if dst, err = appendProducer(dst, key, e); err != nil {
			return nil, err
		}
	}
	return dst, nil
}

func appendProducer(dst []byte, key string, e *entry) ([]byte, error) {
	dst = binary.AppendUvarint(dst, uint64(len(key)))
	dst = append(dst, key...)
	dst, err := e.bin.AppendBinary(dst)
	if err != nil {
		return nil, fmt.Errorf("audit: encode window of %q: %w", truncKey(key), err)
	}
	return dst, nil
}

func appendCRC(dst []byte) []byte { return snapframe.Seal(dst, 0) }

// MarshalBinary encodes the audit's configuration (depth, cap) and every
// producer with its window, least recently used first, in the versioned
// format described in the package documentation.
func (a *Audit) MarshalBinary() ([]byte, error) {
	dst := make([]byte, 0, 16+a.lru.Len()*(64+a.cfg.depth/8))
	dst = appendHeader(dst, a.cfg.depth, a.cfg.maxProducers, a.lru.Len())
	dst, err := a.appendProducers(dst)
	if err != nil {
		return nil, err
	}
	return appendCRC(dst), nil
}

// UnmarshalBinary replaces the audit's producers, depth and cap with those
// of a snapshot made by MarshalBinary (of any of the audit types). A
// snapshot restores state within the audit's configured limits and never
// raises them: one whose depth or producer cap exceeds the largest set by
// Options or by SetDepth / SetMaxProducers is refused, so a crafted
// snapshot cannot make the audit keep more than it was configured for. Every count and length is
// checked against the bytes present before anything is allocated for it;
// on any error, which wraps ErrCorrupt, the audit is left unchanged. The
// counters and MaxIDLength are kept; restored producers count as not
// recently touched only after Depth further checks.
func (a *Audit) UnmarshalBinary(data []byte) error {
	fresh, err := decode(data, a.cfg, nil)
	if err != nil {
		return err
	}
	a.swap(fresh)
	return nil
}

// aboveLimits is the error for a snapshot whose depth or cap exceeds an
// audit's cfg.
func aboveLimits(depth, maxProducers uint64, cfg config) error {
	return fmt.Errorf("%w: depth %d, producer cap %d: above the audit's %d, %d (a snapshot never raises them)",
		ErrCorrupt, depth, maxProducers, cfg.depth, cfg.maxProducers)
}

// swap takes over the producers and settings of fresh (a decoded audit).
func (a *Audit) swap(fresh *Audit) {
	a.lru = fresh.lru
	a.cfg.depth = fresh.cfg.depth
	a.cfg.maxProducers = fresh.cfg.maxProducers
	a.spare = nil
	a.publishOldest()
}

// reader is a snapshot body cursor with the package's own decoders.
type reader struct{ *snapframe.Reader }

// window decodes one window from the front of the remaining bytes into e.
func (r *reader) window(e *entry) {
	if r.Err != nil {
		return
	}
	n, err := e.bin.DecodeFrom(r.B)
	if err != nil {
		r.Wrap(err)
		return
	}
	r.B = r.B[n:]
}

// decode parses a snapshot into a new audit with base's MaxIDLength and
// OnEvict, and the snapshot's depth and cap, which must not exceed base's
// (the receiving audit's). b is the budget of the new audit (nil for a
// standalone one).
func decode(data []byte, base config, b *budget) (*Audit, error) {
	fr, err := snapframe.Open(data, snapMagic, snapVersion, len(snapMagic)+1+3+4, ErrCorrupt)
	if err != nil {
		return nil, err
	}
	r := reader{fr}
	depth := r.Uvarint("depth")
	maxProducers := r.Uvarint("producer cap")
	count := r.Uvarint("producer count")
	switch {
	case r.Err != nil:
		return nil, r.Err
	case depth < 1 || depth > bitsetbin.MaxDepth:
		return nil, fmt.Errorf("%w: depth %d out of range", ErrCorrupt, depth)
	case maxProducers < 1 || maxProducers > MaxProducersLimit:
		return nil, fmt.Errorf("%w: producer cap %d out of range", ErrCorrupt, maxProducers)
	case depth > uint64(base.depth) || maxProducers > uint64(base.maxProducers):
		return nil, aboveLimits(depth, maxProducers, base)
	case count > maxProducers:
		return nil, fmt.Errorf("%w: %d producers above the cap %d", ErrCorrupt, count, maxProducers)
	case count > uint64(len(r.B)/minRecord):
		return nil, fmt.Errorf("%w: %d producers in %d bytes", ErrCorrupt, count, len(r.B))
	}
	cfg := base
	cfg.depth = int(depth)
	cfg.maxProducers = int(maxProducers)
	a := newAudit(cfg, b)
	want := newEntry(cfg.depth, false).bin.Depth() // guaranteed depth of every window
	for i := uint64(0); i < count; i++ {
		keyLen := r.Uvarint("key length")
		if r.Err == nil && (keyLen == 0 || keyLen > uint64(cfg.maxIDLength)) {
			r.Fail("producer %d: key length %d out of range", i, keyLen)
		}
		key := r.Bytes(keyLen, "key")
		if r.Err != nil {
			return nil, r.Err
		}
		if a.lru.Contains(string(key)) { // no allocation for the lookup
			return nil, fmt.Errorf("%w: producer %q twice", ErrCorrupt, truncKey(string(key)))
		}
		e := new(entry)
		r.window(e)
		if r.Err != nil {
			return nil, r.Err
		}
		if e.bin.Depth() != want {
			return nil, fmt.Errorf("%w: producer %q: window depth %d, snapshot depth %d", ErrCorrupt, truncKey(string(key)), e.bin.Depth(), want)
		}
		a.lru.Add(string(key), e)
	}
	if len(r.B) != 0 {
		return nil, fmt.Errorf("%w: %d trailing bytes", ErrCorrupt, len(r.B))
	}
	return a, nil
}

func truncKey(k string) string {
	if len(k) > 64 {
		return k[:64] + "..."
	}
	return k
}
