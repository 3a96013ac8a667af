package idempotency

import (
	"errors"
	"strings"
	"testing"

	"pgregory.net/rapid"
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

func TestStorageKey(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("x", 300)
	tests := []struct {
		key    Key
		max    int
		want   string
		hashed bool
	}{
		{Key{"q", "m1"}, 0, "q/m1", false},
		{Key{"", "m1"}, 0, "/m1", false},
		{Key{"a/b", "c"}, 0, "a%2Fb/c", false},
		{Key{"a", "b/c"}, 0, "a/b/c", false},
		{Key{"50%", "x"}, 0, "50%25/x", false},
		{Key{"q", long}, 0, "", true},
		{Key{"q", long}, 302, "q/" + long, false},
		{Key{"q", long}, 301, "", true},
		{Key{"q", "a\x00b"}, 0, "", true},
		{Key{"q", "\xff"}, 0, "", true},
		{Key{"q", "m1"}, 3, "", true},
	}
	for _, tt := range tests {
		got := tt.key.StorageKey(tt.max)
		if tt.hashed {
			if !strings.HasPrefix(got, HashedKeyPrefix) || len(got) != HashedKeyLength || strings.Contains(got, "/") {
				t.Errorf("%q.StorageKey(%d) = %q, want a hashed key", tt.key, tt.max, got)
			}
			continue
		}
		if got != tt.want {
			t.Errorf("%q.StorageKey(%d) = %q, want %q", tt.key, tt.max, got, tt.want)
		}
	}
}

// TestStorageKeyInjective checks that different keys never share a storage
// key, over namespaces and ids drawn from an alphabet full of the escape
// and separator characters, with verbatim and hashed forms mixed.
func TestStorageKeyInjective(t *testing.T) {
	t.Parallel()
	part := rapid.StringOfN(rapid.SampledFrom([]rune{'a', '/', '%', '2', 'F', '\x00', ':', 's'}), 0, 12, -1)
	rapid.Check(t, func(t *rapid.T) {
		a := Key{part.Draw(t, "ns1"), part.Draw(t, "id1")}
		b := Key{part.Draw(t, "ns2"), part.Draw(t, "id2")}
		max := rapid.IntRange(1, 20).Draw(t, "max")
		if a != b && a.StorageKey(max) == b.StorageKey(max) {
			t.Fatalf("%q and %q share storage key %q", a, b, a.StorageKey(max))
		}
		if a2 := (Key{a.Namespace, a.ID}); a2.StorageKey(max) != a.StorageKey(max) {
			t.Fatal("StorageKey is not deterministic")
		}
	})
}

func TestOptions(t *testing.T) {
	t.Parallel()
	d := Options{}.WithDefaults()
	if d.ClaimTTL != DefaultClaimTTL || d.Retention != DefaultRetention || d.Clock == nil || d.MaxKeyLength != DefaultMaxKeyLength {
		t.Fatalf("defaults = %+v", d)
	}
	for _, o := range []Options{{ClaimTTL: -1}, {Retention: -1}, {MaxKeyLength: -1}} {
		if err := o.Validate(); !errors.Is(err, ErrOptions) {
			t.Errorf("%+v.Validate() = %v, want ErrOptions", o, err)
		}
	}
	if err := (Options{}).Validate(); err != nil {
		t.Errorf("zero Options: %v", err)
	}
}
