package msgid_test

import (
	"errors"
	"strconv"
	"strings"
	"testing"

	"github.com/acemq/msgaudit/msgid"
)

func TestSplit(t *testing.T) {
	t.Parallel()
	tests := []struct {
		id   string
		key  string
		seq  uint64
		fail bool
	}{
		{id: "ID:host-41234-1700000000000-1:1:1:1:42", key: "ID:host-41234-1700000000000-1:1:1:1", seq: 42},
		{id: "ID:vm-39169-1796041243133-1:1:1:1:1", key: "ID:vm-39169-1796041243133-1:1:1:1", seq: 1},
		{id: "seed:7", key: "seed", seq: 7},
		{id: "abc:5", key: "abc", seq: 5},
		{id: "x:0", key: "x", seq: 0},
		{id: "a:b:c:9", key: "a:b:c", seq: 9},
		{id: "::1", key: ":", seq: 1},
		{id: "k:18446744073709551615", key: "k", seq: 18446744073709551615},
		{id: "k:9223372036854775807", key: "k", seq: 9223372036854775807},
		{id: "k:9999999999999999999", key: "k", seq: 9999999999999999999},
		{id: "k:10000000000000000000", key: "k", seq: 10000000000000000000},
		{id: "k ey:3", key: "k ey", seq: 3}, // the key is opaque
		{id: "ключ:12", key: "ключ", seq: 12},

		{id: "", fail: true},
		{id: "nocolon", fail: true},
		{id: "12345", fail: true},
		{id: ":5", fail: true},
		{id: ":", fail: true},
		{id: "abc:", fail: true},
		{id: "a:b:", fail: true},
		{id: "abc:+5", fail: true},
		{id: "abc:-5", fail: true},
		{id: "abc:-0", fail: true},
		{id: "abc: 7", fail: true},
		{id: "abc:7 ", fail: true},
		{id: "abc:7\n", fail: true},
		{id: "abc:xyz", fail: true},
		{id: "abc:1x", fail: true},
		{id: "abc:0x10", fail: true},
		{id: "abc:1_000", fail: true},
		{id: "abc:1.5", fail: true},
		{id: "abc:007", fail: true},
		{id: "abc:00", fail: true},
		{id: "abc:01", fail: true},
		{id: "abc:١٢", fail: true}, // non-ASCII digits
		{id: "abc:18446744073709551616", fail: true},
		{id: "abc:1844674407370955161x", fail: true},
		{id: "abc:184467440737095516x5", fail: true},
		{id: "abc:28446744073709551615", fail: true},
		{id: "abc:99999999999999999999", fail: true},
		{id: "abc:100000000000000000000", fail: true},
		{id: "abc:" + strings.Repeat("1", 40), fail: true},
	}
	for _, tt := range tests {
		t.Run(strconv.Quote(tt.id), func(t *testing.T) {
			t.Parallel()
			key, seq, err := msgid.Split(tt.id)
			if tt.fail {
				if !errors.Is(err, msgid.ErrMalformed) {
					t.Fatalf("Split(%q) = %q, %d, %v; want ErrMalformed", tt.id, key, seq, err)
				}
				if key != "" || seq != 0 {
					t.Fatalf("Split(%q) returned %q, %d with an error", tt.id, key, seq)
				}
				if !strings.Contains(err.Error(), strconv.Quote(tt.id)) {
					t.Fatalf("error %q does not quote the id", err)
				}
				if _, err := msgid.Parse(tt.id); !errors.Is(err, msgid.ErrMalformed) {
					t.Fatalf("Parse(%q) err = %v", tt.id, err)
				}
				return
			}
			if err != nil || key != tt.key || seq != tt.seq {
				t.Fatalf("Split(%q) = %q, %d, %v; want %q, %d", tt.id, key, seq, err, tt.key, tt.seq)
			}
			id, err := msgid.Parse(tt.id)
			if err != nil || id != (msgid.ID{Key: tt.key, Seq: tt.seq}) {
				t.Fatalf("Parse(%q) = %+v, %v", tt.id, id, err)
			}
			if got := id.String(); got != tt.id {
				t.Fatalf("String() = %q, want %q", got, tt.id)
			}
			if got := string(id.AppendTo([]byte("x"))); got != "x"+tt.id {
				t.Fatalf("AppendTo = %q", got)
			}
		})
	}
}

// TestLeadingZerosNeverAlias states the decision on ActiveMQ's lenient
// sequence parsing (docs/activemq-compatibility.md): "abc:5",
// "abc:+5" and "abc:007" are one message to ActiveMQ; here only the
// canonical spelling parses, so two accepted ids never name one message.
func TestLeadingZerosNeverAlias(t *testing.T) {
	t.Parallel()
	if _, s, err := msgid.Split("abc:7"); err != nil || s != 7 {
		t.Fatalf("abc:7 = %d, %v", s, err)
	}
	for _, id := range []string{"abc:007", "abc:+7", "abc:07"} {
		if _, _, err := msgid.Split(id); !errors.Is(err, msgid.ErrMalformed) {
			t.Errorf("Split(%q) err = %v, want ErrMalformed", id, err)
		}
	}
}

func TestErrorTruncatesID(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("a", 10000) + ":x"
	_, _, err := msgid.Split(long)
	if !errors.Is(err, msgid.ErrMalformed) {
		t.Fatalf("err = %v", err)
	}
	want := strconv.Quote(strings.Repeat("a", 64) + "…")
	if !strings.Contains(err.Error(), want) || len(err.Error()) > 200 {
		t.Fatalf("error not truncated: %.300s", err)
	}
	// A multi-byte rune straddling the cut is dropped whole.
	s := strings.Repeat("a", 63) + "é" + "bbbb"
	if got := msgid.Truncate(s); got != strings.Repeat("a", 63)+"…" {
		t.Fatalf("Truncate = %q", got)
	}
	if got := msgid.Truncate("short"); got != "short" {
		t.Fatalf("Truncate(short) = %q", got)
	}
}

func TestSplitLimit(t *testing.T) {
	t.Parallel()
	tests := []struct {
		id    string
		limit int
		want  error
	}{
		{"abc:1", 5, nil},
		{"abc:1", 0, nil},
		{"abc:1", -1, nil},
		{"abc:12", 5, msgid.ErrTooLong},
		{"abc:x", 5, msgid.ErrMalformed},
		{strings.Repeat("k", 2000) + ":1", 1024, msgid.ErrTooLong},
	}
	for _, tt := range tests {
		_, _, err := msgid.SplitLimit(tt.id, tt.limit)
		if !errors.Is(err, tt.want) || (tt.want == nil && err != nil) {
			t.Errorf("SplitLimit(%.20q, %d) err = %v, want %v", tt.id, tt.limit, err, tt.want)
		}
		if errors.Is(err, msgid.ErrTooLong) && len(err.Error()) > 200 {
			t.Errorf("ErrTooLong message not truncated: %.300s", err)
		}
	}
}

func TestSplitAllocs(t *testing.T) {
	ids := []string{"ID:host-41234-1700000000000-1:1:1:1:42", "k:18446744073709551615", "x:0"}
	for _, id := range ids {
		if n := testing.AllocsPerRun(100, func() {
			if _, _, err := msgid.Split(id); err != nil {
				t.Fatal(err)
			}
		}); n != 0 {
			t.Errorf("Split(%q) allocs = %v, want 0", id, n)
		}
	}
	x := msgid.ID{Key: "ID:host-1-2-3:1:1:1", Seq: 12345}
	buf := make([]byte, 0, 64)
	if n := testing.AllocsPerRun(100, func() { buf = x.AppendTo(buf[:0]) }); n != 0 {
		t.Errorf("AppendTo allocs = %v, want 0", n)
	}
}

// TestSplitMatchesStrconv checks the canonical parser against strconv on
// every accepted number form.
func TestSplitMatchesStrconv(t *testing.T) {
	t.Parallel()
	for _, s := range []string{"0", "1", "9", "10", "99", "4294967295", "4294967296",
		"18446744073709551614", "18446744073709551615", "18446744073709551616",
		"18446744073709551620", "28446744073709551615", "00", "09"} {
		want, werr := strconv.ParseUint(s, 10, 64)
		canonical := werr == nil && strconv.FormatUint(want, 10) == s
		_, got, err := msgid.Split("k:" + s)
		if canonical != (err == nil) || (canonical && got != want) {
			t.Errorf("Split(k:%s) = %d, %v; strconv = %d, %v", s, got, err, want, werr)
		}
	}
}
