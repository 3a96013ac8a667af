package metadata_test

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/acemq/msgaudit/metadata"
)

// TestOpenErrorsOnePrefix: an error from Open names its package once
// ("metadata: postgres …: migrate: …", not "metadata: … metadata: …").
// Nothing listens on port 1, so no service is needed.
func TestOpenErrorsOnePrefix(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, u := range []string{
		"bogus://x",
		"postgres://postgres@127.0.0.1:1/x?sslmode=disable",
		"redis://127.0.0.1:1/0",
		"sqlite:" + filepath.Join(t.TempDir(), "no", "such", "dir", "m.db"),
	} {
		s, err := metadata.Open(ctx, u)
		if err == nil {
			s.Close()
			t.Errorf("Open(%q) succeeded", u)
			continue
		}
		if n := strings.Count(err.Error(), "metadata:"); n != 1 {
			t.Errorf("Open(%q): %q names the package %d times, want once", u, err, n)
		}
	}
}
