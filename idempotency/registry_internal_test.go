package idempotency

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/acemq/msgaudit/internal/redact"
)

// withRegistry runs f with the registry holding only m, then restores it.
// The tests using it are not parallel, so no other test sees the swap.
func withRegistry(t *testing.T, m map[string]Opener, f func()) {
	t.Helper()
	defer registry.Swap(m)()
	f()
}

// TestOpenWithoutBackend: a scheme whose backend package is not linked in
// is ErrUnsupportedURL naming the package to import, without the password.
func TestOpenWithoutBackend(t *testing.T) {
	cases := []struct{ url, pkg string }{
		{"sqlite:/tmp/x.db", "idempotency/sqlitestore"},
		{"redis://u:s3cretpw@127.0.0.1:1/0", "idempotency/redisstore"},
		{"REDISS://:s3cretpw@127.0.0.1:1", "idempotency/redisstore"},
		{"redis+cluster://:s3cretpw@127.0.0.1:1,127.0.0.1:2", "idempotency/redisstore"},
		{"rediss+sentinel://u:s3cretpw@127.0.0.1:1/mymaster", "idempotency/redisstore"},
		{"postgres://postgres:s3cretpw@127.0.0.1:1/test", "idempotency/pgstore"},
		{"postgresql://127.0.0.1:1/test?password=s3cretpw", "idempotency/pgstore"},
	}
	withRegistry(t, map[string]Opener{}, func() {
		for _, tc := range cases {
			s, err := Open(context.Background(), tc.url, Options{})
			if !errors.Is(err, ErrUnsupportedURL) || s != nil {
				t.Errorf("Open(%q) = %v, %v; want ErrUnsupportedURL", redactURL(tc.url), s, err)
				continue
			}
			msg := err.Error()
			if want := `import _ "github.com/acemq/msgaudit/` + tc.pkg + `"`; !strings.Contains(msg, want) {
				t.Errorf("Open(%q) error %q does not say %s", redactURL(tc.url), msg, want)
			}
			if strings.Contains(msg, "s3cretpw") {
				t.Errorf("Open error leaks the password: %s", msg)
			}
		}
	})
}

// TestRegister: a registered opener serves its scheme case-insensitively
// and receives the URL and Options; Schemes lists it.
func TestRegister(t *testing.T) {
	withRegistry(t, map[string]Opener{}, func() {
		var gotURL string
		var gotOpts Options
		Register("Test", func(ctx context.Context, rawURL string, o Options) (Store, error) {
			gotURL, gotOpts = rawURL, o
			return memStore(t, o), nil
		})
		s, err := Open(context.Background(), "TEST://x", Options{MaxKeyLength: 64})
		if err != nil {
			t.Fatalf("Open(TEST://x): %v", err)
		}
		defer s.Close()
		if gotURL != "TEST://x" || gotOpts.MaxKeyLength != 64 {
			t.Errorf("opener got %q, %+v; want the URL and Options as given", gotURL, gotOpts)
		}
		if got := strings.Join(schemes(), ","); got != "memory,test" {
			t.Errorf("schemes() = %s, want memory,test", got)
		}
	})
}

// TestRegisterPanics: programming errors at registration panic.
func TestRegisterPanics(t *testing.T) {
	open := func(context.Context, string, Options) (Store, error) { return nil, nil }
	cases := []struct {
		name   string
		scheme string
		opener Opener
	}{
		{"empty scheme", "", open},
		{"memory", "memory", open},
		{"scheme with colon", "a:b", open},
		{"nil opener", "x", nil},
		{"twice", "dup", open},
	}
	withRegistry(t, map[string]Opener{"dup": open}, func() {
		for _, tc := range cases {
			func() {
				defer func() {
					if recover() == nil {
						t.Errorf("Register %s did not panic", tc.name)
					}
				}()
				Register(tc.scheme, tc.opener)
			}()
		}
	})
}

// redactURL masks the password of a URL for an error message.
func redactURL(u string) string { return redact.URL(u) }
