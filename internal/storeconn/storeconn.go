// Package storeconn holds what the network-backed idempotency stores
// (idempotency/pgstore, idempotency/redisstore) share about their
// connections: a context check that notices a passed deadline before its
// timer fires, and the URL handling that keeps passwords out of errors.
package storeconn

import (
	"errors"
	"fmt"
	"net/url"
	"strings"

	"github.com/acemq/msgaudit/internal/redact"
)

// CutQueryParam removes every occurrence of the query parameter name from
// rawURL and returns the rest of the URL byte for byte, the parameter's last
// value and whether it was present. The other parameters keep their text
// and order: re-encoding them would turn an escaped space (%20) into "+",
// which pgx passes to the server as a plus sign. Its error quotes no part
// of the query (see redact.ParseQuery).
func CutQueryParam(rawURL, name string) (clean, value string, found bool, err error) {
	base, rest, hasQuery := strings.Cut(rawURL, "?")
	if !hasQuery {
		return rawURL, "", false, nil
	}
	query, fragment, hasFragment := strings.Cut(rest, "#")
	vals, err := redact.ParseQuery(query)
	if err != nil {
		return "", "", false, fmt.Errorf("query: %w", err)
	}
	v, found := vals[name]
	if !found {
		return rawURL, "", false, nil
	}
	clean = base
	if kept := withoutParam(query, name); kept != "" {
		clean += "?" + kept
	}
	if hasFragment {
		clean += "#" + fragment
	}
	return clean, v[len(v)-1], true, nil
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

// UnwrapURLError drops the *url.Error layer of err, whose message quotes the
// whole URL, password included, and keeps its cause.
func UnwrapURLError(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err
	}
	return err
}

// RedactError returns err with every secret of rawURL replaced (the
// userinfo password and the values of secret query parameters, each raw and
// URL-escaped; see redact.URLSecrets), so no error built from a connection
// attempt can print them. Unwrap still reaches err.
func RedactError(err error, rawURL string) error {
	return redact.New(redact.URLSecrets(rawURL)...).Error(err)
}
