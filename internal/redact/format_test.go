package redact_test

import (
	"fmt"
	"testing"

	"github.com/acemq/msgaudit/internal/redact"
)

// secretive prints only its redacted form, whatever the verb.
type secretive struct{ pass string }

func (secretive) String() string { return "{Pass:[REDACTED]}" }

func (s secretive) Format(f fmt.State, verb rune) { redact.Format(f, verb, s.String()) }

func TestFormat(t *testing.T) {
	v := secretive{pass: "hunter2"}
	for _, tc := range []struct{ format, want string }{
		{"%v", "{Pass:[REDACTED]}"},
		{"%+v", "{Pass:[REDACTED]}"},
		{"%#v", "{Pass:[REDACTED]}"},
		{"%s", "{Pass:[REDACTED]}"},
		{"%q", `"{Pass:[REDACTED]}"`},
		{"%d", "{Pass:[REDACTED]}"},
	} {
		if got := fmt.Sprintf(tc.format, v); got != tc.want {
			t.Errorf("Sprintf(%q) = %q, want %q", tc.format, got, tc.want)
		}
	}
}
