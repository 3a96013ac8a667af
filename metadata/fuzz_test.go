package metadata_test

import (
	"testing"

	"github.com/acemq/msgaudit/metadata"
)

// FuzzStorageKey: the key mapping is injective (two different keys never
// share a storage key), never truncates silently, and every storage key is
// short enough for every backend to index.
func FuzzStorageKey(f *testing.F) {
	long := string(make([]byte, metadata.MaxKeyLen+1))
	h, _ := metadata.StorageKey(long)
	for _, seed := range [][2]string{
		{"a", "b"}, {"a", "a\x00"}, {"\xff", "\xffx"}, {long, h}, {h, h[1:]}, {"file.txt", "file.txt "},
	} {
		f.Add(seed[0], seed[1])
	}
	f.Fuzz(func(t *testing.T, a, b string) {
		ka, errA := metadata.StorageKey(a)
		kb, errB := metadata.StorageKey(b)
		if (errA != nil) != (a == "") || (errB != nil) != (b == "") {
			t.Fatalf("errors %v, %v for %q, %q", errA, errB, a, b)
		}
		if errA != nil || errB != nil {
			return
		}
		if a != b && ka == kb {
			t.Fatalf("%q and %q share storage key %q", a, b, ka)
		}
		for _, k := range []string{ka, kb} {
			if len(k) > metadata.MaxKeyLen {
				t.Fatalf("storage key of %d bytes", len(k))
			}
		}
		if len(a) <= metadata.MaxKeyLen && a[0] != 0xFF && ka != a {
			t.Fatalf("short key %q not stored verbatim", a)
		}
	})
}
