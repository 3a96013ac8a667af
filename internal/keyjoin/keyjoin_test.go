package keyjoin

import (
	"strings"
	"testing"

	"pgregory.net/rapid"
)

// TestTopicCollisions lists pairs a plain base + "#" + consumer join gave
// one string; each must give two.
func TestTopicCollisions(t *testing.T) {
	cases := []struct{ b1, c1, b2, c2 string }{
		{"/topic/a#b", "c", "/topic/a", "b#c"},
		{"/topic/a#", "b", "/topic/a", "#b"},
		{"/topic/a", "b%23c", "/topic/a", "b#c"},
		{"/topic/a%23b", "c", "/topic/a", "b%23c"},
		{"/topic/a", "", "/topic/a#", ""},
	}
	for _, c := range cases {
		if a, b := Topic(c.b1, c.c1), Topic(c.b2, c.c2); a == b {
			t.Errorf("Topic(%q, %q) = Topic(%q, %q) = %q", c.b1, c.c1, c.b2, c.c2, a)
		}
	}
}

// TestTopicUnchanged: an ordinary consumer name is joined as it was.
func TestTopicUnchanged(t *testing.T) {
	for _, c := range []string{"sub-1", "orders.audit", "ID:host-1", "a/b"} {
		if got, want := Topic("/topic/t", c), "/topic/t#"+c; got != want {
			t.Errorf("Topic(%q) = %q, want %q", c, got, want)
		}
	}
}

// split inverts Topic.
func split(s string) (base, consumer string) {
	i := strings.LastIndexByte(s, '#')
	return s[:i], strings.NewReplacer("%25", "%", "%23", "#").Replace(s[i+1:])
}

// TestTopicInjective: Topic is inverted by splitting at the last '#' and
// unescaping, so two different pairs never give one string.
func TestTopicInjective(t *testing.T) {
	alphabet := rapid.StringOfN(rapid.SampledFrom([]rune{'#', '%', '2', '3', '5', 'a', '/', 0}), 0, 12, -1)
	rapid.Check(t, func(t *rapid.T) {
		b, c := alphabet.Draw(t, "base"), alphabet.Draw(t, "consumer")
		if gb, gc := split(Topic(b, c)); gb != b || gc != c {
			t.Fatalf("Topic(%q, %q) splits back as (%q, %q)", b, c, gb, gc)
		}
	})
}

// FuzzTopic: Topic is inverted by split, so it is injective.
func FuzzTopic(f *testing.F) {
	f.Add("/topic/a#b", "c")
	f.Add("/topic/a", "b%23c#")
	f.Fuzz(func(t *testing.T, b, c string) {
		if gb, gc := split(Topic(b, c)); gb != b || gc != c {
			t.Fatalf("Topic(%q, %q) splits back as (%q, %q)", b, c, gb, gc)
		}
	})
}

// TestTagInjective: two different (tag, key) pairs never give one string,
// for tags without ':' and any key.
func TestTagInjective(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		tags := rapid.SampledFrom([]string{"seq", "id", "s", "i", ""})
		t1, t2 := tags.Draw(t, "t1"), tags.Draw(t, "t2")
		k1 := rapid.StringMatching(`[a-z:0-9]{0,6}`).Draw(t, "k1")
		k2 := rapid.StringMatching(`[a-z:0-9]{0,6}`).Draw(t, "k2")
		if (t1 != t2 || k1 != k2) && Tag(t1, k1) == Tag(t2, k2) {
			t.Fatalf("Tag(%q, %q) = Tag(%q, %q) = %q", t1, k1, t2, k2, Tag(t1, k1))
		}
	})
}
