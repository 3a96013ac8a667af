package metadata

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/acemq/msgaudit/internal/redact"
)

// TestOpenWithoutBackend: with no backend registered, a scheme this module
// serves is ErrUnsupportedURL naming the package to import, without the
// password. It swaps the registry, so it is not parallel.
func TestOpenWithoutBackend(t *testing.T) {
	defer registry.Swap(map[string]Opener{})()
	cases := []struct{ url, pkg string }{
		{"sqlite:/tmp/m.db", "metadata/sqlitemeta"},
		{"redis://u:s3cretpw@127.0.0.1:1/0", "metadata/redismeta"},
		{"rediss://:s3cretpw@127.0.0.1:1", "metadata/redismeta"},
		{"redis+cluster://:s3cretpw@127.0.0.1:1,127.0.0.1:2", "metadata/redismeta"},
		{"rediss+sentinel://u:s3cretpw@127.0.0.1:1/mymaster", "metadata/redismeta"},
		{"Postgres://postgres:s3cretpw@127.0.0.1:1/test", "metadata/pgmeta"},
		{"postgresql://127.0.0.1:1/test?password=s3cretpw", "metadata/pgmeta"},
	}
	for _, tc := range cases {
		s, err := Open(context.Background(), tc.url)
		if !errors.Is(err, ErrUnsupportedURL) || s != nil {
			t.Errorf("Open(%q) = %v, %v; want ErrUnsupportedURL", redact.Strict(tc.url), s, err)
			continue
		}
		if want := `import _ "github.com/acemq/msgaudit/` + tc.pkg + `"`; !strings.Contains(err.Error(), want) {
			t.Errorf("Open(%q) error %q does not say %s", redact.Strict(tc.url), err, want)
		}
		if strings.Contains(err.Error(), "s3cretpw") {
			t.Errorf("Open error leaks the password: %v", err)
		}
	}
	if got := strings.Join(schemes(), ","); got != "memory" {
		t.Errorf("schemes() with nothing registered = %s, want memory", got)
	}
}
