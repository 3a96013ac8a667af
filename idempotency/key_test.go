package idempotency

import (
	"errors"
	"testing"
	"time"
)

func TestKeyValidate(t *testing.T) {
	t.Parallel()
	tests := []struct {
		key  Key
		want error
	}{
		{Key{}, ErrInvalidKey},
		{Key{Namespace: "q"}, ErrInvalidKey},
		{Key{ID: "m1"}, nil},
		{Key{Namespace: "q", ID: "m1"}, nil},
	}
	for _, tt := range tests {
		if err := tt.key.Validate(); !errors.Is(err, tt.want) {
			t.Errorf("%+v.Validate() = %v, want %v", tt.key, err, tt.want)
		}
	}
}

func TestOptions(t *testing.T) {
	t.Parallel()
	d, err := Options{}.normalize()
	if err != nil || d.ClaimTTL != 5*time.Minute || d.Retention != 7*24*time.Hour || d.Clock == nil || d.MaxKeyLength != 256 {
		t.Fatalf("defaults = %+v, %v", d, err)
	}
	for _, o := range []Options{{ClaimTTL: -1}, {Retention: -1}, {MaxKeyLength: -1}} {
		if _, err := o.normalize(); !errors.Is(err, ErrOptions) {
			t.Errorf("%+v.normalize() = %v, want ErrOptions", o, err)
		}
	}
	if _, err := (Options{}).normalize(); err != nil {
		t.Errorf("zero Options: %v", err)
	}
}
