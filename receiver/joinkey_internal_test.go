package receiver

import (
	"encoding/binary"
	"strings"
	"testing"
)

// FuzzJoinKey splits the bytes of scope and key at every other place:
// no (scope, key) pair that differs holds the same table key, verbatim or
// hashed, and a verbatim one reads back as its pair.
func FuzzJoinKey(f *testing.F) {
	f.Add("/queue/q1", strings.Repeat("X", maxKeyBytes))
	f.Add("/queue/a\x00b", "c")
	f.Add("/topic/a#b#c", "k")
	f.Fuzz(func(t *testing.T, scope, key string) {
		k := joinKey(scope, key)
		if k[0] == 'k' {
			n, w := binary.Uvarint([]byte(k[1:]))
			if w <= 0 || 1+w+int(n) > len(k) || k[1+w:1+w+int(n)] != scope || k[1+w+int(n):] != key {
				t.Fatalf("joinKey(%q, %q) = %q does not read back", scope, key, k)
			}
		} else if k[0] != 'h' || len(k) != 33 {
			t.Fatalf("joinKey(%q, %q) = %q: neither form", scope, key, k)
		}
		all := scope + key
		for i := 0; i <= len(all); i++ {
			if i == len(scope) {
				continue
			}
			if joinKey(all[:i], all[i:]) == k {
				t.Fatalf("joinKey(%q, %q) = joinKey(%q, %q)", scope, key, all[:i], all[i:])
			}
		}
	})
}
