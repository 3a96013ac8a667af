package msgid

import (
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"
)

// maxQuoted is how many bytes of an offending id an error message keeps.
const maxQuoted = 64

// ID is a parsed message id: producer key and sequence number.
type ID struct {
	// Key is the producer key: everything before the last ':'.
	Key string
	// Seq is the producer sequence number.
	Seq uint64
}

// Split splits id into its producer key (everything before the last ':')
// and its sequence (the canonical decimal after it). It allocates nothing
// on success. Any other input returns an error wrapping ErrMalformed.
func Split(id string) (key string, seq uint64, err error) {
	c := strings.LastIndexByte(id, ':')
	if c <= 0 {
		// No colon, or an empty key (":5").
		return "", 0, malformed(id)
	}
	seq, ok := parseSeq(id[c+1:])
	if !ok {
		return "", 0, malformed(id)
	}
	return id[:c], seq, nil
}

// SplitLimit is Split with a length limit: an id longer than limit bytes
// returns an error wrapping ErrTooLong before any parsing. limit <= 0 means
// no limit.
func SplitLimit(id string, limit int) (key string, seq uint64, err error) {
	if limit > 0 && len(id) > limit {
		return "", 0, fmt.Errorf("%w: %d bytes, limit %d: %q", ErrTooLong, len(id), limit, Truncate(id))
	}
	return Split(id)
}

// Parse is Split returning an ID value.
func Parse(id string) (ID, error) {
	k, s, err := Split(id)
	if err != nil {
		return ID{}, err
	}
	return ID{Key: k, Seq: s}, nil
}

// String returns "<key>:<seq>", the canonical id.
func (x ID) String() string {
	return string(x.AppendTo(make([]byte, 0, len(x.Key)+21)))
}

// AppendTo appends "<key>:<seq>" to dst and returns the extended slice. It
// allocates only if dst lacks capacity.
func (x ID) AppendTo(dst []byte) []byte {
	dst = append(dst, x.Key...)
	dst = append(dst, ':')
	return strconv.AppendUint(dst, x.Seq, 10)
}

// parseSeq parses a canonical decimal uint64: one or more ASCII digits, no
// leading zero unless the number is exactly "0", no overflow.
func parseSeq(s string) (uint64, bool) {
	if len(s) == 0 || len(s) > 20 {
		return 0, false
	}
	if s[0] == '0' {
		return 0, len(s) == 1
	}
	// Up to 19 digits cannot overflow (10^19-1 < 2^64); only the 20th
	// digit needs the overflow check.
	last := len(s)
	if last == 20 {
		last = 19
	}
	var n uint64
	for i := 0; i < last; i++ {
		d := uint64(s[i]) - '0'
		if d > 9 {
			return 0, false
		}
		n = n*10 + d
	}
	if last == 19 && len(s) == 20 {
		d := uint64(s[19]) - '0'
		if d > 9 || n > (1<<64-1-d)/10 {
			return 0, false
		}
		n = n*10 + d
	}
	return n, true
}

func malformed(id string) error {
	return fmt.Errorf("%w: %q", ErrMalformed, Truncate(id))
}

// Truncate shortens s for an error message: at most 64 bytes, cut at a
// UTF-8 boundary, followed by "…" when something was cut.
func Truncate(s string) string {
	if len(s) <= maxQuoted {
		return s
	}
	n := maxQuoted
	// Back off at most UTFMax-1 bytes so a multi-byte rune is not split;
	// invalid UTF-8 is simply cut (%q escapes it anyway).
	for k := 1; k < utf8.UTFMax && !utf8.RuneStart(s[n]); k++ {
		n--
	}
	return s[:n] + "…"
}
