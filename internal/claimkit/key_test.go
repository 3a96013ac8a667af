package claimkit

import (
	"strings"
	"testing"

	"pgregory.net/rapid"

	"github.com/acemq/msgaudit/idempotency"
)

// Key is idempotency.Key with the same fields, so the tables can list
// keys unkeyed.
type Key struct{ Namespace, ID string }

// storageKey is StorageKey of k.
func storageKey(k Key, max int) string { return StorageKey(idempotency.Key(k), max) }

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
		got := storageKey(tt.key, tt.max)
		if tt.hashed {
			if !strings.HasPrefix(got, HashedKeyPrefix) || len(got) != HashedKeyLength || strings.Contains(got, "/") {
				t.Errorf("StorageKey(%q, %d) = %q, want a hashed key", tt.key, tt.max, got)
			}
			continue
		}
		if got != tt.want {
			t.Errorf("StorageKey(%q, %d) = %q, want %q", tt.key, tt.max, got, tt.want)
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
		if a != b && storageKey(a, max) == storageKey(b, max) {
			t.Fatalf("%q and %q share storage key %q", a, b, storageKey(a, max))
		}
		if a2 := (Key{a.Namespace, a.ID}); storageKey(a2, max) != storageKey(a, max) {
			t.Fatal("StorageKey is not deterministic")
		}
	})
}

// TestStorageKeyCollidingPairs lists keys a plain namespace + "/" + id
// join (or one escaping only '/') would store as one.
func TestStorageKeyCollidingPairs(t *testing.T) {
	t.Parallel()
	pairs := [][2]Key{
		{{"a/b", "c"}, {"a", "b/c"}},
		{{"a%2Fb", "c"}, {"a/b", "c"}},
		{{"a%", "2Fb/c"}, {"a%2Fb", "c"}},
		{{"", "a/b"}, {"a", "b"}},
		{{"/queue/a\x00b", "c"}, {"/queue/a", "b\x00c"}},
	}
	for _, p := range pairs {
		for _, max := range []int{0, 8} {
			if a, b := storageKey(p[0], max), storageKey(p[1], max); a == b {
				t.Errorf("%q and %q share storage key %q (max %d)", p[0], p[1], a, max)
			}
		}
	}
}

// FuzzStorageKey moves the boundary between namespace and id to every
// other place: no two different keys share a storage key.
func FuzzStorageKey(f *testing.F) {
	f.Add("/queue/a", "b/c", 0)
	f.Add("a%", "2Fb", 8)
	f.Add("/queue/a/", "b", 0)
	f.Fuzz(func(t *testing.T, ns, id string, max int) {
		max %= 4096
		k := storageKey(Key{ns, id}, max)
		all := ns + id
		for i := 0; i <= len(all); i++ {
			if o := (Key{all[:i], all[i:]}); o != (Key{ns, id}) && storageKey(o, max) == k {
				t.Fatalf("%q and %q share storage key %q", Key{ns, id}, o, k)
			}
		}
	})
}
