package storeconn

import (
	"net/url"
	"strings"
	"testing"
)

func TestCutQueryParam(t *testing.T) {
	for _, tt := range []struct {
		in, name          string
		clean, value      string
		found, wantErrors bool
	}{
		{"redis://h:6379/0", "msgaudit_prefix", "redis://h:6379/0", "", false, false},
		{"redis://h/0?msgaudit_prefix=p", "msgaudit_prefix", "redis://h/0", "p", true, false},
		{"redis://h/0?a=1&msgaudit_prefix=p&msgaudit_prefix=q#f", "msgaudit_prefix", "redis://h/0?a=1#f", "q", true, false},
		{"postgres://u:p%40ss@h/db?sslmode=disable", "msgaudit_table", "postgres://u:p%40ss@h/db?sslmode=disable", "", false, false},
		{"redis://h/0?a=%zz", "x", "", "", false, true},
	} {
		clean, value, found, err := CutQueryParam(tt.in, tt.name)
		if (err != nil) != tt.wantErrors || clean != tt.clean || value != tt.value || found != tt.found {
			t.Errorf("CutQueryParam(%q, %q) = %q, %q, %v, %v; want %q, %q, %v, error %v",
				tt.in, tt.name, clean, value, found, err, tt.clean, tt.value, tt.found, tt.wantErrors)
		}
	}
}

// FuzzCutQueryParam: the part before the query is kept byte for byte, the
// cut parameter is gone, and an error never quotes the URL.
func FuzzCutQueryParam(f *testing.F) {
	f.Add("redis://u:secret@h/0?msgaudit_prefix=p&a=1#x")
	f.Add("postgres://h/db?msgaudit_table=%zz")
	f.Fuzz(func(t *testing.T, in string) {
		clean, _, found, err := CutQueryParam(in, "msgaudit_prefix")
		if err != nil {
			if strings.Contains(err.Error(), in) && in != "" {
				t.Fatalf("error quotes the URL: %v", err)
			}
			return
		}
		base, _, _ := strings.Cut(in, "?")
		if !strings.HasPrefix(clean, base) {
			t.Fatalf("CutQueryParam(%q) = %q: the part before the query changed", in, clean)
		}
		if found {
			_, rest, _ := strings.Cut(clean, "?")
			q, _, _ := strings.Cut(rest, "#")
			if v, err := url.ParseQuery(q); err == nil && v.Has("msgaudit_prefix") {
				t.Fatalf("CutQueryParam(%q) = %q still has the parameter", in, clean)
			}
		}
	})
}
