package redact_test

import (
	"errors"
	"fmt"
	"io/fs"
	"slices"
	"strings"
	"testing"

	"github.com/acemq/msgaudit/internal/redact"
)

func TestParseURL(t *testing.T) {
	for _, c := range []struct {
		in, secret, says string // says: part of the error; "" = accepted
	}{
		{"redis://user:pw@h:6379/0", "", ""},
		{"redis://user:Top%2FSecret@h:6379/0", "", ""},
		{"redis://user:Top/Secret@h:6379/0", "Top", "invalid port"},
		{"redis://user:Top?Secret@h:6379/0", "Top", "invalid port"},
		{"redis://user:Top#Secret@h:6379/0", "Top", "invalid port"},
		{"redis://user:#Secret@h:6379/0", "Secret", "raw '/', '?', '#' or '@'"},
		{"redis://user:/Secret@h:6379/0", "Secret", "raw '/', '?', '#' or '@'"},
		{"redis://user:Top!@Secret!@h:6379/0", "Secret", "raw '/', '?', '#' or '@'"},
		{"postgres://postgres:Top@ Secret@127.0.0.1:1/test", "Secret", "invalid character in the user information"},
		{"amqp://guest:50%off@h/", "off", "the password has an invalid %-escape"},
		{"redis://JQ%KxZZ:pw@h/0", "pw", "the user name has an invalid %-escape"},
		{"redis://h/JQ%KxZZ", "no secret", "the path has an invalid %-escape"},
		{"redis://h/0?password=JQ%KxZZ", "%Kx", "the value of query parameter 1 has an invalid %-escape"},
		{"redis://h/0?a=1&&JQ%Kx=ZZ", "no secret", "the name of query parameter 2 has an invalid %-escape"},
		{"redis://h/0?a=1;password=JQ", "JQ", "query parameter 1 holds a raw ';'"},
	} {
		u, err := redact.ParseURL(c.in)
		switch {
		case c.says == "" && err != nil:
			t.Errorf("%s: %v", c.in, err)
		case c.says == "" && u == nil:
			t.Errorf("%s: nil URL", c.in)
		case c.says != "" && (err == nil || !strings.Contains(err.Error(), c.says) || !errors.Is(err, redact.ErrURL)):
			t.Errorf("%s: error %v, want one saying %q", c.in, err, c.says)
		case c.says != "" && strings.Contains(err.Error(), c.secret):
			t.Errorf("%s: error quotes %q: %v", c.in, c.secret, err)
		case c.says != "" && strings.Contains(redact.URL(c.in), c.secret):
			t.Errorf("URL(%s) = %s keeps %q", c.in, redact.URL(c.in), c.secret)
		}
	}
}

func TestDSNSecrets(t *testing.T) {
	got := redact.DSNSecrets(`host=h password = 'Top\' Secret' sslpassword=k3y user=u`)
	for _, want := range []string{`'Top\' Secret'`, `Top' Secret`, "k3y"} {
		if !slices.Contains(got, want) {
			t.Errorf("DSNSecrets: %q lacks %q", got, want)
		}
	}
	if slices.Contains(got, "u") || slices.Contains(got, "h") {
		t.Errorf("DSNSecrets: %q holds a non-secret value", got)
	}
}

// TestErrorUnwrapRedacted: every error reached through Unwrap is redacted
// too (a broker's ERROR text wrapped by the consumer's error may echo a
// secret), while errors.Is and errors.As still see the original chain.
func TestErrorUnwrapRedacted(t *testing.T) {
	r := redact.New("s3cret")
	inner := &fs.PathError{Op: "open", Path: "/x/s3cret", Err: fs.ErrNotExist}
	err := r.Error(fmt.Errorf("connect: %w", fmt.Errorf("broker said %q: %w", "bad login s3cret", inner)))
	for e := err; e != nil; e = errors.Unwrap(e) {
		if strings.Contains(e.Error(), "s3cret") {
			t.Fatalf("an unwrapped error says %q", e.Error())
		}
	}
	joined := r.Error(fmt.Errorf("both: %w, %w", errors.New("a s3cret"), fs.ErrPermission))
	if u := errors.Unwrap(joined); u == nil || strings.Contains(u.Error(), "s3cret") {
		t.Fatalf("unwrapped multi-error: %v", u)
	}
	var pe *fs.PathError
	if !errors.Is(err, fs.ErrNotExist) || !errors.As(err, &pe) || !errors.Is(joined, fs.ErrPermission) {
		t.Fatal("errors.Is / errors.As lost the chain")
	}
}
