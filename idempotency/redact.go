package idempotency

import (
	"net/url"
	"strings"
)

// redacted replaces a password in RedactURL's result.
const redacted = "xxxxx"

// secretParams are query parameters RedactURL masks (lowercase).
var secretParams = []string{"password", "pass", "passwd", "sslpassword", "secret", "token"}

// RedactURL returns rawURL with any password replaced by "xxxxx": the
// password of the userinfo (redis://user:pw@host, postgres://u:pw@h/db) and
// query parameters such as password= or sslpassword=. A string that does
// not parse as a URL is masked textually the same way, so the result is
// safe to put in an error or a log line either way.
func RedactURL(rawURL string) string {
	u, err := url.Parse(rawURL)
	if err != nil || u.Scheme == "" || u.Opaque != "" {
		return redactText(rawURL)
	}
	changed := false
	if u.User != nil {
		if _, ok := u.User.Password(); ok {
			u.User = url.UserPassword(u.User.Username(), redacted)
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
				if isSecretParam(name) {
					for i := range vals {
						vals[i] = redacted
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
	return u.String()
}

func isSecretParam(name string) bool {
	name = strings.ToLower(name)
	for _, s := range secretParams {
		if name == s {
			return true
		}
	}
	return false
}

// redactText masks a string that is not a parseable URL: everything
// between the first ':' of the userinfo and its '@', and the values of
// secret key=value parameters.
func redactText(s string) string {
	if i := strings.Index(s, "://"); i >= 0 {
		rest := s[i+3:]
		if at := strings.LastIndexByte(rest, '@'); at >= 0 {
			if colon := strings.IndexByte(rest[:at], ':'); colon >= 0 {
				s = s[:i+3] + rest[:colon+1] + redacted + rest[at:]
			}
		}
	}
	return redactQueryText(s)
}

// redactQueryText masks the value of every secret name=value pair, whether
// separated by '&', '?', ';' or spaces.
func redactQueryText(s string) string {
	var b strings.Builder
	for len(s) > 0 {
		i := strings.IndexByte(s, '=')
		if i < 0 {
			b.WriteString(s)
			break
		}
		start := strings.LastIndexAny(s[:i], "?&; \t") + 1
		name := s[start:i]
		b.WriteString(s[:i+1])
		s = s[i+1:]
		if isSecretParam(name) {
			end := strings.IndexAny(s, "&; \t")
			if end < 0 {
				end = len(s)
			}
			b.WriteString(redacted)
			s = s[end:]
		}
	}
	return b.String()
}
