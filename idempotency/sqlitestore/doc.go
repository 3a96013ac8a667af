// Package sqlitestore is the SQLite backend of package idempotency: an
// embedded, durable store in one file (modernc.org/sqlite, pure Go), the
// default for one machine.
//
// Importing it registers the "sqlite" scheme with idempotency.Open:
//
//	import _ "github.com/acemq/msgaudit/idempotency/sqlitestore"
//
//	s, err := idempotency.Open(ctx, "sqlite:/var/lib/app/idem.db", idempotency.Options{})
//
// sqlite:PATH and sqlite://PATH name the file PATH (sqlite:///abs/x.db is
// /abs/x.db). Open opens a file directly.
package sqlitestore

import (
	"context"
	"fmt"
	"strings"

	"github.com/acemq/msgaudit/idempotency"
)

func init() { idempotency.Register("sqlite", openURL) }

// openURL is idempotency.Open's entry for sqlite: URLs.
func openURL(ctx context.Context, rawURL string, o idempotency.Options) (idempotency.Store, error) {
	_, rest, _ := strings.Cut(rawURL, ":")
	path := strings.TrimPrefix(rest, "//")
	if path == "" {
		return nil, fmt.Errorf("%w: %q: sqlite needs a file path", idempotency.ErrUnsupportedURL, idempotency.RedactURL(rawURL))
	}
	s, err := Open(ctx, path, o)
	if err != nil {
		return nil, err
	}
	return s, nil
}
