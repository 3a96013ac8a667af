package logkey_test

import (
	"errors"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/acemq/msgaudit/internal/logkey"
)

// TestString: a text up to MaxBytes comes back as it is; a longer one,
// whatever its bytes, as valid UTF-8 within MaxBytes that starts with the
// text's head and tells texts apart.
func TestString(t *testing.T) {
	short := strings.Repeat("k", logkey.MaxBytes)
	if got := logkey.String(short); got != short {
		t.Errorf("a text of MaxBytes changed: %q", got)
	}
	for _, c := range []struct{ s, head string }{
		{strings.Repeat("k", logkey.MaxBytes+1), strings.Repeat("k", 64)},
		{strings.Repeat("é", 1<<19), strings.Repeat("é", 32)},
		{"a" + strings.Repeat("é", 1<<19), "a" + strings.Repeat("é", 31)},
		{strings.Repeat("\xff", 1<<20), ""},
	} {
		got := logkey.String(c.s)
		if len(got) > logkey.MaxBytes || !utf8.ValidString(got) || !strings.HasPrefix(got, c.head+"...(") {
			t.Errorf("String(%d bytes) = %q, want %q... within %d bytes", len(c.s), got, c.head, logkey.MaxBytes)
		}
	}
	a, b := strings.Repeat("a", 1000), strings.Repeat("a", 999)+"b"
	if logkey.String(a) == logkey.String(b) || logkey.String(a) != logkey.String(strings.Clone(a)) {
		t.Error("two long texts that differ only at the end must differ, and one text must give one result")
	}
}

func TestError(t *testing.T) {
	if got := logkey.Error(nil); got != "" {
		t.Fatalf("logkey.Error(nil) = %q", got)
	}
	short := strings.Repeat("e", logkey.MaxErrorBytes)
	if got := logkey.Error(errors.New(short)); got != short {
		t.Fatalf("a %d-byte error text was changed", len(short))
	}
	got := logkey.Error(errors.New(short + "x"))
	if len(got) > logkey.MaxErrorBytes || !strings.HasPrefix(got, short[:logkey.MaxErrorBytes-128]) {
		t.Fatalf("a long error text bounded to %d bytes: %.80q", len(got), got)
	}
	if logkey.Error(errors.New(short+"y")) == got {
		t.Fatal("two long error texts bounded alike")
	}
}
