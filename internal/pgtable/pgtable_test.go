package pgtable

import (
	"strings"
	"testing"
)

func TestCheck(t *testing.T) {
	for _, tt := range []struct {
		found       bool
		persistence string
		want        string // "" = accepted
	}{
		{true, "p", ""},
		{true, "t", "temporary schema"},
		{true, "u", "unlogged"},
		{true, "x", "persistence"},
		{false, "", "does not resolve"},
	} {
		err := Check(`"t"`, tt.found, "s", tt.persistence)
		if tt.want == "" && err != nil || tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)) {
			t.Errorf("Check(found %v, %q) = %v, want %q", tt.found, tt.persistence, err, tt.want)
		}
	}
}

func TestTempSchema(t *testing.T) {
	for _, s := range []string{"pg_temp", "PG_TEMP", "pg_temp_3", "pg_toast_temp_12", "Pg_Temp_0"} {
		if !TempSchema.MatchString(s) {
			t.Errorf("%q not matched", s)
		}
	}
	for _, s := range []string{"", "pg_temporary", "my_pg_temp", "public", "pg_temp_", "pg_tempx"} {
		if TempSchema.MatchString(s) {
			t.Errorf("%q matched", s)
		}
	}
}
