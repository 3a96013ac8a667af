// Package sqlitemeta is the SQLite backend of package metadata
// (modernc.org/sqlite, pure Go). Importing it registers the "sqlite" scheme
// with metadata.Open:
//
//	import _ "github.com/acemq/msgaudit/metadata/sqlitemeta"
//
//	s, err := metadata.Open(ctx, "sqlite:/var/lib/app/meta.db")
//
// sqlite:PATH[?msgaudit_table=NAME] names the file and the table (default
// "msgaudit_metadata"); a table in the temporary schema (temp.NAME) is refused,
// its rows being private to one connection and gone when it closes. Open
// opens a file directly; New uses a database the application opened.
package sqlitemeta

import (
	"context"
	"fmt"
	"strings"

	"github.com/acemq/msgaudit/internal/metaurl"
	"github.com/acemq/msgaudit/metadata"
)

// defaultTable is the table when Options.Table and the URL name none.
const defaultTable = "msgaudit_metadata"

// Options configures a SQLite metadata store. The zero value means every
// default.
type Options struct {
	// Table is the store's table, plain or schema-qualified; a table in
	// SQLite's temporary schema (temp.NAME) is refused. Empty means
	// "msgaudit_metadata".
	Table string
}

func init() { metadata.Register("sqlite", openSQLiteURL) }

func openSQLiteURL(ctx context.Context, rawURL string) (metadata.StoreCloser, error) {
	table, rest, err := metaurl.CutParam(rawURL, metaurl.TableParam, defaultTable)
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

// quoteTable validates name (a plain or schema-qualified identifier) and
// returns it quoted for SQL text, with its schema. A table in SQLite's temporary schema
// (temp., or temporary.) is refused: its rows belong to one connection and
// vanish when it closes. An unqualified name is qualified with main, so a
// temporary table of the same name on a shared connection cannot shadow
// it.
func quoteTable(name string) (quoted, schema string, err error) {
	if !tableName.MatchString(name) {
		return "", "", fmt.Errorf("%w: table %q", metadata.ErrInvalidName, name)
	}
	parts := strings.Split(name, ".")
	if len(parts) == 1 {
		parts = []string{"main", parts[0]}
	}
	if s := strings.ToLower(parts[0]); s == "temp" || s == "temporary" {
		return "", "", fmt.Errorf("%w: table %q is in SQLite's temporary schema, whose rows belong to one connection and vanish when it closes", metadata.ErrInvalidName, name)
	}
	schema = parts[0]
	for i, p := range parts {
		parts[i] = `"` + p + `"`
	}
	return strings.Join(parts, "."), schema, nil
}
