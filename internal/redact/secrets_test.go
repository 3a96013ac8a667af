package redact

import (
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"strings"
	"testing"

	"pgregory.net/rapid"
)

// checkStrings reports every input r.String does not map to its want.
func checkStrings(t *testing.T, r Redactor, cases map[string]string) {
	t.Helper()
	for in, want := range cases {
		if got := r.String(in); got != want {
			t.Errorf("String(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestRedactor(t *testing.T) {
	t.Parallel()
	r := New("p@ss w", "", "hunter2")
	checkStrings(t, r, map[string]string{
		"login p@ss w failed": "login xxxxx failed",
		"query p%40ss+w":      "query xxxxx", // url.QueryEscape
		"path p@ss%20w":       "path xxxxx",  // url.PathEscape
		"userinfo p%40ss%20w": "userinfo xxxxx",
		"hunter2 and hunter2": "xxxxx and xxxxx",
		"nothing secret here": "nothing secret here",
		"":                    "",
	})
	if (Redactor{}).String("hunter2") != "hunter2" || !(Redactor{}).Empty() || !New("").Empty() || r.Empty() {
		t.Error("the zero or empty Redactor must replace nothing and report Empty")
	}
}

// TestRedactorLongestFirst: a secret that contains another is masked
// whole, not cut into a visible rest by the shorter one.
func TestRedactorLongestFirst(t *testing.T) {
	t.Parallel()
	for _, r := range []Redactor{New("pw", "pw-long-secret"), New("pw-long-secret", "pw"), New("pw").With("pw-long-secret")} {
		if got := r.String("a pw-long-secret b pw"); got != "a xxxxx b xxxxx" {
			t.Errorf("String = %q, want both masked whole", got)
		}
	}
}

func TestRedactorWithKeepsOriginal(t *testing.T) {
	t.Parallel()
	a := New("one")
	b := a.With("two")
	if a.String("one two") != "xxxxx two" || b.String("one two") != "xxxxx xxxxx" {
		t.Errorf("With changed its receiver or lost a secret: %q, %q", a.String("one two"), b.String("one two"))
	}
}

func TestRedactorError(t *testing.T) {
	t.Parallel()
	r := New("s3cret")
	base := fmt.Errorf("dial s3cret: %w", fs.ErrNotExist)
	err := r.Error(base)
	if err.Error() != "dial xxxxx: file does not exist" {
		t.Errorf("Error() = %q", err.Error())
	}
	if !errors.Is(err, base) || !errors.Is(err, fs.ErrNotExist) {
		t.Error("the redacted error lost its chain")
	}
	var pe *fs.PathError
	wrapped := r.Error(&fs.PathError{Op: "open", Path: "/s3cret", Err: fs.ErrPermission})
	if !errors.As(wrapped, &pe) || pe.Path != "/s3cret" || strings.Contains(wrapped.Error(), "s3cret") {
		t.Errorf("errors.As through the redacted error failed or it leaks: %v", wrapped)
	}
	clean := errors.New("no secret")
	if r.Error(clean) != clean || r.Error(nil) != nil || (Redactor{}).Error(base) != base {
		t.Error("an error without secrets, nil, or an empty Redactor must pass unchanged")
	}
}

func TestURLSecrets(t *testing.T) {
	t.Parallel()
	r := New(URLSecrets("amqp://u:p%40ss@h/", "redis://:rpw@h/0?password=qpw&passphrase=pp1", "::not a url u:np@x",
		"postgres://u:s3%zz@h/db", "redis://h/0")...)
	checkStrings(t, r, map[string]string{
		"login p@ss failed":      "login xxxxx failed",
		"url p%40ss":             "url xxxxx",
		"redis rpw, qpw and pp1": "redis xxxxx, xxxxx and xxxxx",
		"unparsable s3%zz":       "unparsable xxxxx",
		"nothing secret here":    "nothing secret here",
	})
	if got := URLSecrets("redis://h:6379/0", "memory", ""); len(got) != 0 {
		t.Errorf("URLSecrets of URLs without secrets = %q", got)
	}
}

// TestRedactorModel compares String with a simple model: text made of
// secrets and of noise that cannot form one (no letter, digit or escape
// character of a secret or its escaped forms), each secret followed by
// noise; the result is the text with every secret piece replaced by Mask.
func TestRedactorModel(t *testing.T) {
	t.Parallel()
	rapid.Check(t, func(t *rapid.T) {
		secrets := rapid.SliceOfN(rapid.StringMatching(`[a-w@%/ ]{1,8}`), 1, 5).Draw(t, "secrets")
		r := New(secrets...)
		pieces := rapid.SliceOfN(rapid.IntRange(-1, len(secrets)-1), 0, 12).Draw(t, "pieces")
		var in, want strings.Builder
		for i, p := range pieces {
			noise := rapid.StringMatching(`[yz.,]{1,3}`).Draw(t, fmt.Sprint("noise", i))
			if p >= 0 {
				in.WriteString(secrets[p])
				want.WriteString(Mask)
			}
			in.WriteString(noise)
			want.WriteString(noise)
		}
		if got := r.String(in.String()); got != want.String() {
			t.Fatalf("String(%q) = %q, want %q (secrets %q)", in.String(), got, want.String(), secrets)
		}
		for _, s := range secrets {
			for _, form := range []string{s, url.QueryEscape(s), url.PathEscape(s)} {
				if got := r.String("<" + form + ">"); got != "<"+Mask+">" {
					t.Fatalf("String(%q) = %q, want the form masked", "<"+form+">", got)
				}
			}
		}
	})
}

func BenchmarkRedactorString(b *testing.B) {
	r := New(URLSecrets("amqps://app:Sup3r-s3cret@rabbit:5671/prod", "redis://:R3dis-pw@cache:6379/0")...)
	for _, bc := range []struct{ name, in string }{
		{"secret=none", "rabbitconsumer: settling a delivery failed: channel closed by the broker"},
		{"secret=one", "dial amqps://app:Sup3r-s3cret@rabbit:5671/prod: connection refused"},
	} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				_ = r.String(bc.in)
			}
		})
	}
}

func BenchmarkURL(b *testing.B) {
	for _, bc := range []struct{ name, in string }{
		{"form=plain", "redis://127.0.0.1:6379/0"},
		{"form=userinfo", "postgres://postgres:s3cret@127.0.0.1:5432/test?sslmode=disable"},
		{"form=libpq", "host=h password='s3 cret' user=u"},
	} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				_ = URL(bc.in)
			}
		})
	}
}
