package metaurl

import (
	"errors"
	"testing"

	"github.com/acemq/msgaudit/metadata"
)

// TestCutParam: the parameter is cut and every other one keeps its text
// and order; pgx reads "+" as a plus sign, so an escaped space must stay
// %20.
func TestCutParam(t *testing.T) {
	for _, tt := range []struct {
		in, value, rest string
	}{
		{"postgres://h/db", "def", "postgres://h/db"},
		{"postgres://h/db?msgaudit_table=t", "t", "postgres://h/db"},
		{"postgres://h/db?msgaudit_table=t&options=-c%20statement_timeout%3D5000", "t",
			"postgres://h/db?options=-c%20statement_timeout%3D5000"},
		{"postgres://h/db?z=1&msgaudit_table=a&a=x+y&msgaudit_table=b&b=%2B", "b", "postgres://h/db?z=1&a=x+y&b=%2B"},
		{"postgres://h/db?options=-c%20x%3Dy", "def", "postgres://h/db?options=-c%20x%3Dy"},
	} {
		value, rest, err := CutParam(tt.in, TableParam, "def")
		if err != nil || value != tt.value || rest != tt.rest {
			t.Errorf("CutParam(%q) = %q, %q, %v; want %q, %q", tt.in, value, rest, err, tt.value, tt.rest)
		}
	}
	if _, _, err := CutParam("postgres://h/db?a=%zz", TableParam, ""); !errors.Is(err, metadata.ErrUnsupportedURL) {
		t.Errorf("bad query: %v, want ErrUnsupportedURL", err)
	}
}
