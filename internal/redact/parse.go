package redact

import (
	"errors"
	"fmt"
	"net/url"
	"strings"
)

// ErrURL is wrapped by the errors of ParseURL.
var ErrURL = errors.New("invalid URL")

// encodeHint tells how to write a password that breaks a URL.
const encodeHint = "percent-encode '%', '@', ':', '/', '?', '#' and spaces in a user name or password (%25 %40 %3A %2F %3F %23 %20)"

// ParseURL parses a "scheme://..." connection URL with net/url. Unlike
// url.Parse's, its error quotes no part of rawURL: it wraps ErrURL, names
// the URL masked as Strict masks it, says what is wrong and how to encode a
// password. It also refuses a URL whose userinfo holds a raw '/', '?', '#'
// or '@' even where net/url accepts it, because backends split such URLs
// differently and would take part of the password for a host, a path or
// an option (an '@' after the host, in a path or query, must then be
// percent-encoded too). A query url.ParseQuery rejects is refused as
// ParseQuery refuses it.
func ParseURL(rawURL string) (*url.URL, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, fmt.Errorf("%w %s: %s; %s", ErrURL, Strict(rawURL), urlProblem(rawURL, err), encodeHint)
	}
	if ambiguousUserinfo(rawURL) {
		return nil, fmt.Errorf("%w %s: a raw '/', '?', '#' or '@' in the user information; %s", ErrURL, Strict(rawURL), encodeHint)
	}
	if _, err := url.ParseQuery(u.RawQuery); err != nil {
		return nil, fmt.Errorf("%w %s: %s; %s", ErrURL, Strict(rawURL), queryProblem(u.RawQuery), queryHint)
	}
	return u, nil
}

// queryHint tells how to write a parameter value that breaks a query.
const queryHint = "percent-encode '%', '&', ';', '#' and '+' in a parameter value (%25 %26 %3B %23 %2B)"

// ParseQuery parses a URL's query text as url.ParseQuery does. Unlike
// url.ParseQuery's, its error quotes no part of query, whose values may be
// secrets: it wraps ErrURL and names the malformed parameter by its place
// in the query (1 for the first) and says whether its name or its value is
// at fault.
func ParseQuery(query string) (url.Values, error) {
	v, err := url.ParseQuery(query)
	if err != nil {
		return nil, fmt.Errorf("%w: %s; %s", ErrURL, queryProblem(query), queryHint)
	}
	return v, nil
}

// queryProblem names the first parameter of query that url.ParseQuery
// rejects, by its place, without quoting it.
func queryProblem(query string) string {
	n := 0
	for _, part := range strings.Split(query, "&") {
		if part == "" {
			continue
		}
		n++
		if strings.Contains(part, ";") {
			return fmt.Sprintf("query parameter %d holds a raw ';'", n)
		}
		k, v, _ := strings.Cut(part, "=")
		if _, err := url.QueryUnescape(k); err != nil {
			return fmt.Sprintf("the name of query parameter %d has an invalid %%-escape", n)
		}
		if _, err := url.QueryUnescape(v); err != nil {
			return fmt.Sprintf("the value of query parameter %d has an invalid %%-escape", n)
		}
	}
	return "cannot parse the query"
}

// urlProblem names what url.Parse found wrong in rawURL without quoting
// the input, as its own messages do.
func urlProblem(rawURL string, err error) string {
	msg := err.Error()
	if strings.Contains(msg, "invalid URL escape") {
		if part := escapePart(rawURL); part != "" {
			return part + " has an invalid %-escape"
		}
	}
	for _, p := range []struct{ in, says string }{
		{"invalid port", "invalid port after the host (a '/', '?' or '#' in a password ends the host early)"},
		{"invalid URL escape", "invalid %-escape"},
		{"invalid userinfo", "invalid character in the user information"},
		{"in host name", "invalid character in the host"},
		{"control character", "control character"},
		{"missing protocol scheme", "missing scheme"},
		{"first path segment", "colon in the first path segment"},
		{"missing ']'", "missing ']' in the host"},
	} {
		if strings.Contains(msg, p.in) {
			return p.says
		}
	}
	return "cannot parse"
}

// escapePart names the part of rawURL, split as url.Parse splits it, that
// holds a '%' not followed by two hex digits: "the password", "the user
// name", "the host", "the path" or "the fragment"; "" if none does.
func escapePart(rawURL string) string {
	rest, fragment, _ := strings.Cut(rawURL, "#")
	_, rest, _ = strings.Cut(rest, "://")
	rest, _, _ = strings.Cut(rest, "?")
	authority, path := rest, ""
	if i := strings.IndexByte(rest, '/'); i >= 0 {
		authority, path = rest[:i], rest[i:]
	}
	host := authority
	if at := strings.LastIndexByte(authority, '@'); at >= 0 {
		host = authority[at+1:]
		user, pass, _ := strings.Cut(authority[:at], ":")
		switch {
		case badEscape(pass):
			return "the password"
		case badEscape(user):
			return "the user name"
		}
	}
	switch {
	case badEscape(host):
		return "the host"
	case badEscape(path):
		return "the path"
	case badEscape(fragment):
		return "the fragment"
	}
	return ""
}

// badEscape reports whether s holds a '%' not followed by two hex digits.
func badEscape(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] == '%' && (i+2 >= len(s) || !isHex(s[i+1]) || !isHex(s[i+2])) {
			return true
		}
	}
	return false
}

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

// DSNSecrets returns the values of the secret parameters (password,
// sslpassword, any name with "pass" in it) of a libpq key=value connection
// string, each as written and unquoted. Pass them to New.
func DSNSecrets(dsn string) []string {
	var out []string
	s := dsn
	for {
		i := strings.IndexByte(s, '=')
		if i < 0 {
			return out
		}
		key := strings.TrimRight(s[:i], " \t")
		name := key[strings.LastIndexAny(key, " \t")+1:]
		v := strings.TrimLeft(s[i+1:], " \t")
		n := valueEnd(v)
		if IsSecretParam(name) && n > 0 {
			raw := v[:n]
			out = append(out, raw)
			if unq := unquoteDSN(raw); unq != "" && unq != raw {
				out = append(out, unq)
			}
		}
		s = v[n:]
	}
}

// unquoteDSN removes libpq's quotes and backslash escapes from a value.
func unquoteDSN(v string) string {
	v = strings.TrimPrefix(v, "'")
	if strings.HasSuffix(v, "'") && !strings.HasSuffix(v, `\'`) {
		v = v[:len(v)-1]
	}
	var b strings.Builder
	for i := 0; i < len(v); i++ {
		if v[i] == '\\' && i+1 < len(v) {
			i++
		}
		b.WriteByte(v[i])
	}
	return b.String()
}
