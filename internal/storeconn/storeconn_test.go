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
		// The other parameters keep their text: pgx reads "+" as a plus
		// sign, so an escaped space must stay %20.
		{"postgres://h/db?msgaudit_table=t&options=-c%20statement_timeout%3D5000", "msgaudit_table",
			"postgres://h/db?options=-c%20statement_timeout%3D5000", "t", true, false},
		{"postgres://h/db?z=1&msgaudit_table=t&a=x+y&b=%2B", "msgaudit_table", "postgres://h/db?z=1&a=x+y&b=%2B", "t", true, false},
		{"postgres://h/db?msgaudit%5Ftable=t&&a=1", "msgaudit_table", "postgres://h/db?a=1", "t", true, false},
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
	f.Add("postgres://h/db?msgaudit_prefix=p&options=-c%20search_path%3Dx&b=a+b")
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
			// Every other parameter is kept as written, in order.
			_, inRest, _ := strings.Cut(in, "?")
			inQuery, _, _ := strings.Cut(inRest, "#")
			var want []string
			for _, part := range strings.Split(inQuery, "&") {
				k, _, _ := strings.Cut(part, "=")
				if key, _ := url.QueryUnescape(k); part != "" && key != "msgaudit_prefix" {
					want = append(want, part)
				}
			}
			if strings.Join(want, "&") != q {
				t.Fatalf("CutQueryParam(%q) = %q: the other parameters changed (want query %q)", in, clean, strings.Join(want, "&"))
			}
		}
	})
}
