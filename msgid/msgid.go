package msgid

import (
	"fmt"
	"math/bits"
	"strconv"
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
	// The usual id has a sequence of 1 to 7 digits: then the last 8 bytes
	// hold it and the colon before it, and one look at them does it all.
	if len(id) >= 8 {
		v, nd := digitBlock(id[len(id)-8:])
		if nd != 0 {
			z := bits.LeadingZeros64(nd) // 8 × the number of trailing digits
			c := len(id) - 1 - z>>3      // the byte before them: the colon
			if z == 0 || c == 0 || id[c] != ':' || z > 8 && id[c+1] == '0' {
				return "", 0, malformed(id)
			}
			return id[:c], digits8(v &^ (1<<((64-z)&63) - 1)), nil
		}
	}
	return splitSlow(id)
}

// splitSlow is Split for ids shorter than 8 bytes and for sequences of 8
// or more digits.
func splitSlow(id string) (key string, seq uint64, err error) {
	// id[e:] are the digits read so far, seq is their value (modulo 2^64)
	// and the next digit to the left is worth scale. Read 8 bytes at a
	// time while there are 8 to read and at most 20 digits have been read;
	// then one byte at a time, up to 21 digits (one more than a uint64
	// has, so a long run of digits is not read to its end).
	e, scale := len(id), uint64(1)
	for e >= 8 && len(id)-e <= 20 {
		v, nd := digitBlock(id[e-8 : e])
		if nd != 0 {
			// The digits start in this block; id[e-1] is now a non-digit.
			if z := bits.LeadingZeros64(nd); z != 0 {
				seq += digits8(v&^(1<<((64-z)&63)-1)) * scale
				e -= z >> 3
			}
			break
		}
		seq += digits8(v) * scale
		scale *= 1e8
		e -= 8
	}
	for e > 0 && len(id)-e <= 20 && id[e-1]-'0' <= 9 {
		e--
		seq += uint64(id[e]-'0') * scale
		scale *= 10
	}
	c, n := e-1, len(id)-e // the colon; the number of digits
	if c <= 0 || id[c] != ':' || n == 0 || n > 1 && id[e] == '0' || n > 20 ||
		// 20 digits are at least 10^19 and at most 2^64-1 < 2*10^19: the
		// first digit is 1, and seq, which is the value modulo 2^64, is
		// then either the value or less than 2*10^19-2^64 < 10^19.
		n == 20 && (id[e] != '1' || seq < 1e19) {
		return "", 0, malformed(id)
	}
	return id[:c], seq, nil
}

// digitBlock reads 8 bytes of b (which must have 8) as a little-endian
// word and maps '0'..'9' to 0..9: v holds the mapped bytes, b[0] in the
// lowest, and nd has bit 7 set in each byte of v that is not a digit and
// no other bit.
func digitBlock(b string) (v, nd uint64) {
	v = uint64(b[0]) | uint64(b[1])<<8 | uint64(b[2])<<16 | uint64(b[3])<<24 |
		uint64(b[4])<<32 | uint64(b[5])<<40 | uint64(b[6])<<48 | uint64(b[7])<<56
	v ^= 0x3030303030303030 // '0'..'9' become 0..9, every other byte > 9
	// Per byte, without carries between bytes: bit 7 of (low 7 bits + 0x76)
	// is set iff the low 7 bits are at least 10; bit 7 of v itself is set
	// for the bytes at or above 0x80.
	nd = (v&0x7f7f7f7f7f7f7f7f + 0x7676767676767676 | v) & 0x8080808080808080
	return v, nd
}

// digits8 returns the value of an 8-digit decimal whose digit values
// (0..9) are the bytes of v, the most significant digit in the lowest
// byte. Cleared bytes at the low end act as leading zeros.
func digits8(v uint64) uint64 {
	// Byte 2i becomes the two-digit number 10*byte(2i) + byte(2i+1).
	v = v*10 + v>>8
	// Two multiplications place the four two-digit numbers (bytes 0, 2, 4
	// and 6) times 10^6, 10^4, 10^2 and 1 in the upper 32 bits, where
	// their sum (< 10^8) cannot carry out.
	return ((v&0x000000ff000000ff)*(100+1000000<<32) + (v>>16&0x000000ff000000ff)*(1+10000<<32)) >> 32
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
