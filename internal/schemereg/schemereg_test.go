package schemereg

import (
	"errors"
	"slices"
	"strings"
	"testing"
)

var errUnsupported = errors.New("unsupported")

func TestRegistry(t *testing.T) {
	r := New[func() int]("pkg", "memory", map[string]string{"redis": "example.com/redisstore"})
	r.Register("Custom", func() int { return 7 }, false)
	if got := r.Schemes(); !slices.Equal(got, []string{"custom", "memory"}) {
		t.Fatalf("Schemes = %v", got)
	}
	scheme, rest := Scheme("CUSTOM://u:p@h/x")
	if scheme != "custom" || rest != "//u:p@h/x" {
		t.Fatalf("Scheme = %q, %q", scheme, rest)
	}
	o, err := r.Lookup(scheme, "shown", "", errUnsupported)
	if err != nil || o() != 7 {
		t.Fatalf("Lookup(custom) = %v", err)
	}
	for _, tc := range []struct{ scheme, want, contains string }{
		{"redis", "", `no backend for "shown"; import _ "example.com/redisstore"`},
		{"ftp", "", `unsupported: "shown"`},
		{"ftp", "memory or custom", `unsupported: "shown" (want memory or custom)`},
	} {
		_, err := r.Lookup(tc.scheme, "shown", tc.want, errUnsupported)
		if !errors.Is(err, errUnsupported) || !strings.Contains(err.Error(), tc.contains) {
			t.Errorf("Lookup(%s) = %v, want one containing %q", tc.scheme, err, tc.contains)
		}
	}

	restore := r.Swap(map[string]func() int{})
	if _, err := r.Lookup("custom", "shown", "", errUnsupported); err == nil {
		t.Fatal("Lookup after Swap found the old opener")
	}
	restore()
	if _, err := r.Lookup("custom", "shown", "", errUnsupported); err != nil {
		t.Fatalf("Lookup after restore: %v", err)
	}
}

func TestRegisterPanics(t *testing.T) {
	r := New[func()]("pkg", "memory", nil)
	r.Register("x", func() {}, false)
	for _, tc := range []struct {
		name, scheme string
		isNil        bool
		want         string
	}{
		{"empty", "", false, "invalid scheme"},
		{"builtin", "MEMORY", false, "invalid scheme"},
		{"colon", "a:b", false, "invalid scheme"},
		{"slash", "a/b", false, "invalid scheme"},
		{"nil opener", "y", true, "nil Opener"},
		{"twice", "X", false, "called twice"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			defer func() {
				v := recover()
				if s, _ := v.(string); !strings.HasPrefix(s, "pkg: ") || !strings.Contains(s, tc.want) {
					t.Fatalf("panic %v, want one containing %q", v, tc.want)
				}
			}()
			r.Register(tc.scheme, func() {}, tc.isNil)
		})
	}
}
