// Package metaurl holds the URL handling the metadata backends share.
package metaurl

import (
	"fmt"
	"net/url"
	"strings"

	"github.com/acemq/msgaudit/internal/redact"
	"github.com/acemq/msgaudit/metadata"
)

// Query parameters the openers remove from a URL before the driver sees it.
const (
	TableParam  = "msgaudit_table"
	PrefixParam = "msgaudit_prefix"
)

// CutParam removes the query parameter name from rawURL and returns its
// value (def when absent) and the URL without it. The other parameters
// keep their text and order: re-encoding them would turn an escaped space
// (%20) into "+", which pgx passes to the server as a plus sign. Its error
// quotes no part of the query (see redact.ParseQuery).
func CutParam(rawURL, name, def string) (value, rest string, err error) {
	base, query, ok := strings.Cut(rawURL, "?")
	if !ok {
		return def, rawURL, nil
	}
	q, err := redact.ParseQuery(query)
	if err != nil {
		return "", "", fmt.Errorf("%w: %q: bad query: %w", metadata.ErrUnsupportedURL, redact.Strict(base), err)
	}
	value = def
	if vs, ok := q[name]; ok {
		value = vs[len(vs)-1]
	}
	if kept := withoutParam(query, name); kept != "" {
		return value, base + "?" + kept, nil
	}
	return value, base, nil
}

// withoutParam returns query (a URL's query text, which url.ParseQuery
// accepts) without its name=value pairs for name, every other pair kept
// as written.
func withoutParam(query, name string) string {
	var kept []string
	for _, part := range strings.Split(query, "&") {
		k, _, _ := strings.Cut(part, "=")
		if key, err := url.QueryUnescape(k); part == "" || err == nil && key == name {
			continue
		}
		kept = append(kept, part)
	}
	return strings.Join(kept, "&")
}

// CheckURL refuses a URL that net/url cannot split as a backend would
// (see redact.ParseURL), with an error that quotes no part of its
// password.
func CheckURL(rawURL string) error {
	if _, err := redact.ParseURL(rawURL); err != nil {
		return fmt.Errorf("%w: %w", metadata.ErrUnsupportedURL, err)
	}
	return nil
}

// RedactError returns err with every secret of rawURL masked (see
// redact.URLSecrets); errors.Is and errors.As still see err's chain.
func RedactError(err error, rawURL string) error {
	return redact.New(redact.URLSecrets(rawURL)...).Error(err)
}
