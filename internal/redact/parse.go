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
// percent-encoded too).
func ParseURL(rawURL string) (*url.URL, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, fmt.Errorf("%w %s: %s; %s", ErrURL, Strict(rawURL), urlProblem(err), encodeHint)
	}
	if ambiguousUserinfo(rawURL) {
		return nil, fmt.Errorf("%w %s: a raw '/', '?', '#' or '@' in the user information; %s", ErrURL, Strict(rawURL), encodeHint)
	}
	return u, nil
}

// urlProblem names what url.Parse found wrong without quoting the input,
// as its own messages do.
func urlProblem(err error) string {
	msg := err.Error()
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
