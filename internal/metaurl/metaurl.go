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
// value (def when absent) and the URL without it.
func CutParam(rawURL, name, def string) (value, rest string, err error) {
	base, query, ok := strings.Cut(rawURL, "?")
	if !ok {
		return def, rawURL, nil
	}
	q, err := url.ParseQuery(query)
	if err != nil {
		return "", "", fmt.Errorf("%w: %q: bad query: %v", metadata.ErrUnsupportedURL, metadata.RedactURL(base), err)
	}
	value = def
	if vs, ok := q[name]; ok {
		value = vs[len(vs)-1]
		delete(q, name)
	}
	if len(q) == 0 {
		return value, base, nil
	}
	return value, base + "?" + q.Encode(), nil
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
