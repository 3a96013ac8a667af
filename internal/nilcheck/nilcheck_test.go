package nilcheck

import (
	"io"
	"testing"
)

type impl struct{}

func (*impl) Read([]byte) (int, error) { return 0, io.EOF }

func TestIsNil(t *testing.T) {
	var nilPtr *impl
	var nilReader io.Reader = nilPtr
	var nilFunc func()
	for _, tt := range []struct {
		name string
		v    any
		want bool
	}{
		{"nil interface", nil, true},
		{"typed nil pointer", nilPtr, true},
		{"typed nil in an interface", nilReader, true},
		{"nil map", map[string]int(nil), true},
		{"nil slice", []int(nil), true},
		{"nil func", nilFunc, true},
		{"pointer", &impl{}, false},
		{"value", impl{}, false},
		{"zero int", 0, false},
		{"empty string", "", false},
		{"empty map", map[string]int{}, false},
	} {
		if got := IsNil(tt.v); got != tt.want {
			t.Errorf("%s: IsNil(%#v) = %t, want %t", tt.name, tt.v, got, tt.want)
		}
	}
}
