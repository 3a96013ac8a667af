package msgid

import (
	"errors"
	"strconv"
	"strings"
	"testing"
)

// splitRef is the straightforward Split (strings.LastIndexByte, then a
// digit-by-digit parse) kept as the reference the optimised Split must match
// on every input.
func splitRef(id string) (key string, seq uint64, err error) {
	c := strings.LastIndexByte(id, ':')
	if c <= 0 {
		return "", 0, malformed(id)
	}
	seq, ok := parseSeqRef(id[c+1:])
	if !ok {
		return "", 0, malformed(id)
	}
	return id[:c], seq, nil
}

// parseSeqRef parses a canonical decimal uint64: one or more ASCII digits,
// no leading zero unless the number is exactly "0", no overflow.
func parseSeqRef(s string) (uint64, bool) {
	if len(s) == 0 || len(s) > 20 {
		return 0, false
	}
	if s[0] == '0' {
		return 0, len(s) == 1
	}
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

// checkSplitMatchesRef fails t unless Split, and splitSlow on its own (it
// handles any id, not only those Split passes it), agree with splitRef on
// id: the same key and sequence, or the same error wrapping ErrMalformed
// with zero results.
func checkSplitMatchesRef(t *testing.T, id string) {
	t.Helper()
	wkey, wseq, werr := splitRef(id)
	for _, f := range []struct {
		name  string
		split func(string) (string, uint64, error)
	}{{"Split", Split}, {"splitSlow", splitSlow}} {
		key, seq, err := f.split(id)
		if (err == nil) != (werr == nil) || key != wkey || seq != wseq {
			t.Fatalf("%s(%q) = %q, %d, %v; reference %q, %d, %v", f.name, id, key, seq, err, wkey, wseq, werr)
		}
		if err != nil && (!errors.Is(err, ErrMalformed) || err.Error() != werr.Error()) {
			t.Fatalf("%s(%q) err = %v; reference %v", f.name, id, err, werr)
		}
	}
}

// splitEdgeIDs are the edge cases of Split: empty key or sequence, leading
// zeros, signs and spaces, the uint64 boundary, more than one colon, bytes
// next to '0' and '9' and non-ASCII bytes, with sequences of every length
// around the 8-byte block boundaries.
var splitEdgeIDs = []string{
	"", ":", "::", ":1", "::1", "a:", "a:0", "a:00", "a:01", "a:10", "a:+1", "a:-1", "a: 1", "a:1 ", "a:1\x00",
	"a:18446744073709551615", "a:18446744073709551616", "a:18446744073709551614",
	"a:99999999999999999999", "a:100000000000000000000", "a:10000000000000000000",
	"a:09999999999999999999", "a:28446744073709551615", "a:19446744073709551615",
	"a:b:3", "a:b:", "a:b:c:d:42", "ID:host-41234-1700000000000-1:1:1:17:123456",
	"ID:host-41234-1700000000000-1:1:1:1:42", "1234567", "12345678", "123456789",
	"a:1/", "a:/1", "a:1:", "a:9;", "a:;9", "k:\xb1", "k:1\xb1", "k:\xb1\xb2", "é:1", "é:é", "ключ:12",
	"abc:١٢", "\xff:1", "k:\xff", "k:\x80", "k:\x7f", "k:\xaf", "k:\xba", "k:\xb0",
	"abcdefg:1", "abcdefg:12", "abcdefgh:1234567", "abcdefgh:12345678", "a:12345678",
	"a:1234567", "a:123456789", "a:0123456", "a:01234567", "a:012345678",
	"a:1234567890123456", "a:123456789012345", "a:12345678901234567", "a:0234567890123456",
	"a:1234567x90123456", "a:x234567890123456", "a:12345678901234x6",
	"xxxxxxxxxxxxxxxxxxxxxxxxx:1", "xxxxxxxxxxxxxxxxxxxxxxxx:12345678901234567890",
	":12345678", ":1234567", ":123456789", "1:12345678", "12345678:", "1234567:8",
	"k:" + strings.Repeat("1", 21), "k:" + strings.Repeat("1", 40), strings.Repeat("9", 30),
}

func FuzzSplitMatchesReference(f *testing.F) {
	for _, id := range splitEdgeIDs {
		f.Add(id)
	}
	f.Fuzz(checkSplitMatchesRef)
}

func TestSplitEdgeCases(t *testing.T) {
	t.Parallel()
	max := uint64(18446744073709551615)
	tests := []struct {
		id   string
		key  string
		seq  uint64
		fail bool
	}{
		{id: "", fail: true},
		{id: ":", fail: true},
		{id: ":1", fail: true},
		{id: "a:", fail: true},
		{id: "a:0", key: "a", seq: 0},
		{id: "a:00", fail: true},
		{id: "a:01", fail: true},
		{id: "a:10", key: "a", seq: 10},
		{id: "a:+1", fail: true},
		{id: "a: 1", fail: true},
		{id: "a:18446744073709551615", key: "a", seq: max},
		{id: "a:18446744073709551614", key: "a", seq: max - 1},
		{id: "a:18446744073709551616", fail: true},
		{id: "a:19446744073709551615", fail: true},
		{id: "a:99999999999999999999", fail: true},
		{id: "a:10000000000000000000", key: "a", seq: 10000000000000000000},
		{id: "a:100000000000000000000", fail: true},
		{id: "a:b:3", key: "a:b", seq: 3},
		{id: "a:b:", fail: true},
		{id: "::1", key: ":", seq: 1},
		{id: "ID:host-41234-1700000000000-1:1:1:17:123456", key: "ID:host-41234-1700000000000-1:1:1:17", seq: 123456},
		{id: "é:1", key: "é", seq: 1},
		{id: "k:\xb1", fail: true}, // '1' with the high bit set
		{id: "k:1\xb1", fail: true},
		{id: "\xff:1", key: "\xff", seq: 1},
		{id: "abc:١٢", fail: true},
		{id: "12345678", fail: true},
		{id: "1:12345678", key: "1", seq: 12345678},
		{id: ":12345678", fail: true},
		{id: "1234567:8", key: "1234567", seq: 8},
		{id: "abcdefgh:1234567", key: "abcdefgh", seq: 1234567},
		{id: "a:01234567", fail: true},
		{id: "a:1234567890123456", key: "a", seq: 1234567890123456},
		{id: "a:12345678901234567", key: "a", seq: 12345678901234567},
		{id: "a:0234567890123456", fail: true},
		{id: "a:1234567x90123456", fail: true},
		{id: "k:" + strings.Repeat("1", 21), fail: true},
		{id: strings.Repeat("9", 30), fail: true},
	}
	for _, tt := range tests {
		t.Run(strconv.Quote(tt.id), func(t *testing.T) {
			t.Parallel()
			key, seq, err := Split(tt.id)
			if tt.fail {
				if !errors.Is(err, ErrMalformed) || key != "" || seq != 0 {
					t.Fatalf("Split(%q) = %q, %d, %v; want ErrMalformed", tt.id, key, seq, err)
				}
			} else if err != nil || key != tt.key || seq != tt.seq {
				t.Fatalf("Split(%q) = %q, %d, %v; want %q, %d", tt.id, key, seq, err, tt.key, tt.seq)
			}
			checkSplitMatchesRef(t, tt.id)
		})
	}
}

// TestSplitMatchesReferenceEveryByte compares Split with splitRef on ids of
// every length up to 40 bytes with each of the last 23 bytes replaced by
// every byte value in turn, so every byte value is seen at every position
// relative to the end of the id, the colon and the 8-byte blocks.
func TestSplitMatchesReferenceEveryByte(t *testing.T) {
	t.Parallel()
	digits := "18446744073709551615"
	var bases []string
	for n := 1; n <= 21; n++ {
		seq := strings.Repeat("7", n)
		if n <= len(digits) {
			seq = digits[:n]
		}
		for keyLen := 0; keyLen <= 19; keyLen++ {
			bases = append(bases, strings.Repeat("k", keyLen)+":"+seq)
		}
	}
	bases = append(bases, "a:18446744073709551616", "a:10000000000000000000", "a:99999999999999999999")
	for _, base := range bases {
		b := []byte(base)
		for p := max(0, len(b)-23); p < len(b); p++ {
			orig := b[p]
			for v := 0; v < 256; v++ {
				b[p] = byte(v)
				checkSplitMatchesRef(t, string(b))
			}
			b[p] = orig
		}
	}
}

// BenchmarkSplitSeqDigits measures Split on an OpenWire id by the number of
// digits in its sequence.
func BenchmarkSplitSeqDigits(b *testing.B) {
	for _, seq := range []string{"7", "123456", "1234567", "12345678", "123456789012345", "1234567890123456", "18446744073709551615"} {
		id := "ID:host-41234-1700000000000-1:1:1:17:" + seq
		b.Run("digits="+strconv.Itoa(len(seq)), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				k, s, err := Split(id)
				if err != nil {
					b.Fatal(err)
				}
				benchKey, benchSeq = k, s
			}
		})
	}
}

var (
	benchKey string
	benchSeq uint64
)
