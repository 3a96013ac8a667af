package redact

import (
	"fmt"
	"io"
)

// Format writes s, a value's redacted String, for any fmt verb: quoted for
// %q, as is for every other verb (%v, %+v, %#v, %s), so that no verb can
// reach the fields String hides. A type's Format method calls it.
func Format(f fmt.State, verb rune, s string) {
	if verb == 'q' {
		s = fmt.Sprintf("%q", s)
	}
	_, _ = io.WriteString(f, s)
}
