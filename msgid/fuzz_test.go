package msgid_test

import (
	"errors"
	"strconv"
	"strings"
	"testing"

	"github.com/acemq/msgaudit/msgid"
)

// FuzzSplit checks that Split never panics, that every error wraps
// ErrMalformed, and that on success the id is exactly key+":"+seq — so the
// canonical form is the only accepted form.
func FuzzSplit(f *testing.F) {
	for _, s := range []string{
		"ID:host-41234-1700000000000-1:1:1:1:42", "abc:5", "x:0", "abc:007", "abc:+5", "abc:-5",
		":5", "abc:", "nocolon", "", "abc: 7", "k:18446744073709551615", "k:18446744073709551616",
		"a:b:", "::", "é:1", "k:\x00",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, id string) {
		key, seq, err := msgid.Split(id)
		if err != nil {
			if !errors.Is(err, msgid.ErrMalformed) {
				t.Fatalf("Split(%q) err = %v, not ErrMalformed", id, err)
			}
			if key != "" || seq != 0 {
				t.Fatalf("Split(%q) returned %q, %d with an error", id, key, seq)
			}
			return
		}
		if key == "" || strings.LastIndexByte(id, ':') != len(key) {
			t.Fatalf("Split(%q) key %q is not everything before the last colon", id, key)
		}
		if got := key + ":" + strconv.FormatUint(seq, 10); got != id {
			t.Fatalf("Split(%q) = %q, %d; formats back as %q", id, key, seq, got)
		}
		if got := (msgid.ID{Key: key, Seq: seq}).String(); got != id {
			t.Fatalf("ID.String() = %q, want %q", got, id)
		}
	})
}
