package inboxsql

import (
	"strings"
	"testing"

	"github.com/acemq/msgaudit/idempotency"
	"pgregory.net/rapid"
)

// TestStorageKeyInjective: two different values never share a stored
// form, verbatim and hashed ones included, and a stored form is never
// longer than max or a hashed key.
func TestStorageKeyInjective(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		max := rapid.IntRange(1, 80).Draw(t, "max")
		gen := rapid.OneOf(
			rapid.String(),
			rapid.StringN(0, 200, -1),
			rapid.Custom(func(t *rapid.T) string { return idempotency.HashedKeyPrefix + rapid.String().Draw(t, "rest") }),
			rapid.Custom(func(t *rapid.T) string { return StorageKey(rapid.StringN(81, 120, -1).Draw(t, "long"), 1) }),
		)
		a, b := gen.Draw(t, "a"), gen.Draw(t, "b")
		sa, sb := StorageKey(a, max), StorageKey(b, max)
		if a != b && sa == sb {
			t.Fatalf("%q and %q share the stored form %q", a, b, sa)
		}
		if a == b && sa != sb {
			t.Fatalf("%q stored two ways", a)
		}
		if len(sa) > max && len(sa) != idempotency.HashedKeyLength {
			t.Fatalf("stored form of %q is %d bytes (max %d)", a, len(sa), max)
		}
	})
	if got := StorageKey("plain", 16); got != "plain" {
		t.Errorf("a short key is stored as %q", got)
	}
	if got := StorageKey(strings.Repeat("x", 17), 16); !strings.HasPrefix(got, idempotency.HashedKeyPrefix) {
		t.Errorf("a long key is stored as %q", got)
	}
}

// TestBuild: table names are validated and quoted, and schema-qualified
// names put the SQLite index in the schema.
func TestBuild(t *testing.T) {
	for _, c := range []struct {
		table    string
		postgres bool
		ok       bool
		create   string // in the index statement
	}{
		{"", true, true, `"msgaudit_inbox_recorded_at_idx" ON "msgaudit_inbox"`},
		{"audit.inbox", true, true, `"inbox_recorded_at_idx" ON "audit"."inbox"`},
		{"audit.inbox", false, true, `"audit"."inbox_recorded_at_idx" ON "inbox"`},
		{"Mixed_Case1", false, true, `"Mixed_Case1_recorded_at_idx" ON "Mixed_Case1"`},
		{strings.Repeat("a", 47), true, true, ""},
		{strings.Repeat("a", 48), true, false, ""},
		{"a.b.c", true, false, ""},
		{`x"; DROP TABLE y; --`, true, false, ""},
		{"1abc", false, false, ""},
	} {
		st, err := Build(c.table, c.postgres)
		if (err == nil) != c.ok {
			t.Errorf("Build(%q) error %v; want ok=%v", c.table, err, c.ok)
			continue
		}
		if c.create != "" && !strings.Contains(st.Create[1], c.create) {
			t.Errorf("Build(%q, postgres=%v) index statement %q; want it to contain %q", c.table, c.postgres, st.Create[1], c.create)
		}
	}
}
