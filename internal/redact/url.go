package redact

import (
	"net/url"
	"strings"
)

// Mask replaces every secret in the results of this package.
const Mask = "xxxxx"

// secretParams are query parameters URL masks (lowercase).
var secretParams = []string{"password", "pass", "passwd", "sslpassword", "secret", "token"}

// URL returns rawURL with any password replaced by "xxxxx": the
// password of the userinfo (redis://user:pw@host, postgres://u:pw@h/db) and
// query parameters such as password= or sslpassword=. A string that does
// not parse as a hierarchical URL — no scheme (//u:pw@h, u:pw@h), an opaque
// form without "//" (redis:u:pw@h), userinfo-like text in a path with no
// host (redis:/u:pw@h, redis:///u:pw@h), a bad port or escape, a raw
// '/', '?', '#' or '@' in the userinfo (redis://u:a/b@h) — is masked
// textually the same way, erring towards masking too much, so the result
// is safe to put in an error or a log line either way. In a URL that holds
// a secret, a fragment is masked as well: it is the rest of a password
// whose raw '#' ended it.
func URL(rawURL string) string {
	u, err := url.Parse(rawURL)
	if err != nil || u.Scheme == "" || u.Opaque != "" || (u.Host == "" && strings.Contains(u.Path, "@")) || ambiguousUserinfo(rawURL) {
		return redactText(rawURL)
	}
	changed := false
	if u.User != nil {
		if _, ok := u.User.Password(); ok {
			u.User = url.UserPassword(u.User.Username(), Mask)
			changed = true
		}
	}
	if u.RawQuery != "" {
		q, err := url.ParseQuery(u.RawQuery)
		if err != nil {
			u.RawQuery = redactQueryText(u.RawQuery)
			changed = true
		} else {
			for name, vals := range q {
				if IsSecretParam(name) {
					for i := range vals {
						vals[i] = Mask
					}
					changed = true
				}
			}
			if changed {
				u.RawQuery = q.Encode()
			}
		}
	}
	if !changed {
		return rawURL // unchanged, byte for byte
	}
	// A connection URL has no use for a fragment: in one that holds a
	// secret, a fragment is the rest of a password whose raw '#' ended it
	// ("?password=ab#cd").
	if u.Fragment != "" {
		u.Fragment, u.RawFragment = Mask, ""
	}
	return u.String()
}

// ambiguousUserinfo reports whether rawURL holds text that looks like
// userinfo (a ':' before the last '@' after "://") with a raw '/', '?',
// '#' or '@' in it. Parsers split such a URL differently: net/url ends the
// authority at the first '/', '?' or '#' and the userinfo at the last '@',
// pgx's parser at the first '@'; either way part of the password would be
// taken for a host, a path or an option, and quoted in their errors.
func ambiguousUserinfo(rawURL string) bool {
	_, rest, ok := strings.Cut(rawURL, "://")
	if !ok {
		return false
	}
	at := strings.LastIndexByte(rest, '@')
	return at >= 0 && strings.Contains(rest[:at], ":") && strings.ContainsAny(rest[:at], "/?#@")
}

// Strict is URL, except that an opaque URL whose opaque part holds
// userinfo ("redis:u:pw@h", "u:pw@h/x y") is reduced to "scheme:(redacted)":
// nothing after the scheme is shown, because where a password ends in such
// text is a guess.
func Strict(rawURL string) string {
	if u, err := url.Parse(rawURL); err == nil && u.Opaque != "" && strings.Contains(u.Opaque, "@") {
		return u.Scheme + ":(redacted)"
	}
	return URL(rawURL)
}

// IsSecretParam reports whether a query or key=value parameter name holds
// a secret: password, pass, passwd, sslpassword, secret, token or any other
// name containing "pass", in any case.
func IsSecretParam(name string) bool {
	name = strings.ToLower(name)
	if strings.Contains(name, "pass") {
		return true
	}
	for _, s := range secretParams {
		if name == s {
			return true
		}
	}
	return false
}

// redactText masks a string that is not a hierarchical URL: everything
// between the first ':' of the userinfo and the last '@', and the values of
// secret key=value parameters. The userinfo starts after the scheme and any
// slashes; a scheme is only skipped when "/" follows it or it is a known
// connection scheme, because in "u:p:w@h" the "u:" is a user, not a scheme,
// and skipping it would leave "p" of the password p:w visible. For the
// same reason, when a known scheme without "/" is followed by userinfo
// without ':' ("postgres:pw@h"), that userinfo is masked: the "scheme" may
// be the user and the rest its password.
func redactText(s string) string {
	head := schemePrefix(s)
	rest := s[len(head):]
	n := len(rest) - len(strings.TrimLeft(rest, "/"))
	opaque := head != "" && n == 0
	head, rest = s[:len(head)+n], rest[n:]
	if at := strings.LastIndexByte(rest, '@'); at >= 0 {
		if colon := strings.IndexByte(rest[:at], ':'); colon >= 0 {
			s = head + rest[:colon+1] + Mask + rest[at:]
		} else if opaque && at > 0 {
			s = head + Mask + rest[at:]
		}
	}
	return redactQueryText(s)
}

// knownSchemes are connection schemes whose "scheme:" prefix redactText
// keeps even when no "/" follows (lowercase).
var knownSchemes = []string{"redis", "rediss", "unix", "postgres", "postgresql", "amqp", "amqps",
	"stomp", "stomp+ssl", "stomp+tls", "ssl", "tls", "tcp", "sqlite", "http", "https"}

// schemePrefix returns "scheme:" if s starts with a syntactically valid
// scheme that is followed by '/' or is one of knownSchemes, else "".
func schemePrefix(s string) string {
	i := strings.IndexByte(s, ':')
	if i <= 0 {
		return ""
	}
	scheme := s[:i]
	for j := 0; j < len(scheme); j++ {
		c := scheme[j]
		letter := 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z'
		if !letter && (j == 0 || !('0' <= c && c <= '9' || c == '+' || c == '-' || c == '.')) {
			return ""
		}
	}
	if strings.HasPrefix(s[i+1:], "/") {
		return s[:i+1]
	}
	lower := strings.ToLower(scheme)
	for _, k := range knownSchemes {
		if lower == k {
			return s[:i+1]
		}
	}
	return ""
}

// redactQueryText masks the value of every secret name=value pair, whether
// separated by '&', '?', ';' or spaces, including libpq's key/value form:
// spaces around '=', a 'quoted value' and backslash escapes.
func redactQueryText(s string) string {
	var b strings.Builder
	for len(s) > 0 {
		i := strings.IndexByte(s, '=')
		if i < 0 {
			b.WriteString(s)
			break
		}
		key := strings.TrimRight(s[:i], " \t")
		name := key[strings.LastIndexAny(key, "?&; \t")+1:]
		b.WriteString(s[:i+1])
		s = s[i+1:]
		if !IsSecretParam(name) {
			continue
		}
		v := strings.TrimLeft(s, " \t")
		b.WriteString(s[:len(s)-len(v)])
		b.WriteString(Mask)
		s = v[valueEnd(v):]
	}
	return b.String()
}

// valueEnd returns the length of the value at the start of v: a 'quoted'
// value up to its closing quote, else up to '&', ';', a space or a tab; a
// backslash escapes the next byte either way (libpq's rules; where
// backslashes are not escapes this only masks more).
func valueEnd(v string) int {
	quoted := strings.HasPrefix(v, "'")
	j := 0
	if quoted {
		j = 1
	}
	for ; j < len(v); j++ {
		switch c := v[j]; {
		case c == '\\':
			j++
		case quoted && c == '\'':
			return j + 1
		case !quoted && (c == '&' || c == ';' || c == ' ' || c == '\t'):
			return j
		}
	}
	return len(v)
}
