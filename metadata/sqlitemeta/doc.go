// Package sqlitemeta is the SQLite backend of package metadata
// (modernc.org/sqlite, pure Go). Importing it registers the "sqlite" scheme
// with metadata.Open:
//
//	import _ "github.com/acemq/msgaudit/metadata/sqlitemeta"
//
//	s, err := metadata.Open(ctx, "sqlite:/var/lib/app/meta.db")
//
// sqlite:PATH[?msgaudit_table=NAME] names the file and the table (default
// DefaultTable). Open opens a file directly; New uses a database the
// application opened.
package sqlitemeta

import (
	"context"
	"fmt"
	"strings"

	"github.com/acemq/msgaudit/internal/metaurl"
	"github.com/acemq/msgaudit/metadata"
)

// DefaultTable is the table Open and a sqlite: URL without msgaudit_table
// use.
const DefaultTable = "msgaudit_metadata"

func init() { metadata.Register("sqlite", openSQLiteURL) }

func openSQLiteURL(ctx context.Context, rawURL string) (metadata.StoreCloser, error) {
	table, rest, err := metaurl.CutParam(rawURL, metaurl.TableParam, DefaultTable)
	if err != nil {
		return nil, err
	}
	path := rest[len("sqlite:"):]
	path = strings.TrimPrefix(path, "//")
	if strings.Contains(path, "?") {
		return nil, fmt.Errorf("%w: sqlite URL takes only the table parameter: %q", metadata.ErrUnsupportedURL, rawURL)
	}
	return openSQLite(ctx, path, table)
}

// check is metadata.CheckArgs.
func check(ctx context.Context, key string, values ...string) (string, error) {
	return metadata.CheckArgs(ctx, key, values...)
}

// quoteTable validates name (a plain or schema-qualified identifier) and
// returns it quoted for SQL text.
func quoteTable(name string) (string, error) {
	if !tableName.MatchString(name) {
		return "", fmt.Errorf("%w: table %q", metadata.ErrInvalidName, name)
	}
	parts := strings.Split(name, ".")
	for i, p := range parts {
		parts[i] = `"` + p + `"`
	}
	return strings.Join(parts, "."), nil
}
