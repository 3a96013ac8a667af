package redact

import (
	"cmp"
	"net/url"
	"slices"
	"strings"
)

// Redactor replaces known secrets (a passcode, the passwords of URLs) in
// text headed for a log line or an error. The zero value replaces
// nothing. A Redactor is immutable: With returns a new one.
type Redactor struct {
	secrets []string // longest first, so no secret is cut by a shorter one
}

// New returns a Redactor of the given secrets; empty strings are ignored.
// Each secret is also replaced in its URL-escaped forms, as it appears
// inside a connection string.
func New(secrets ...string) Redactor {
	return Redactor{}.With(secrets...)
}

// With returns a Redactor of r's secrets and the given ones.
func (r Redactor) With(secrets ...string) Redactor {
	all := slices.Clone(r.secrets)
	for _, s := range secrets {
		if s == "" {
			continue
		}
		userinfo := strings.TrimPrefix(url.UserPassword("", s).String(), ":")
		all = append(all, s, url.QueryEscape(s), url.PathEscape(s), userinfo)
	}
	slices.SortFunc(all, func(a, b string) int {
		return cmp.Or(cmp.Compare(len(b), len(a)), strings.Compare(a, b))
	})
	return Redactor{secrets: slices.Compact(all)}
}

// Empty reports whether r has no secret to replace.
func (r Redactor) Empty() bool { return len(r.secrets) == 0 }

// String returns s with every secret replaced by Mask.
func (r Redactor) String(s string) string {
	for _, p := range r.secrets {
		s = strings.ReplaceAll(s, p, Mask)
	}
	return s
}

// Error returns err unchanged if its message holds no secret, else an
// error that prints the message with the secrets replaced and wraps err,
// so errors.Is and errors.As still see the chain. Error(nil) is nil.
func (r Redactor) Error(err error) error {
	if err == nil || len(r.secrets) == 0 {
		return err
	}
	msg := err.Error()
	if clean := r.String(msg); clean != msg {
		return &redactedError{msg: clean, err: err}
	}
	return err
}

// redactedError keeps the chain of err but prints msg.
type redactedError struct {
	msg string
	err error
}

func (e *redactedError) Error() string { return e.msg }
func (e *redactedError) Unwrap() error { return e.err }

// URLSecrets returns the secrets held by the given connection strings: the
// userinfo password (decoded, and as written), and the values of query
// parameters that hold a secret (password=, sslpassword=, token=, any name
// with "pass" in it). A string url.Parse rejects still yields the text
// between the userinfo's first ':' and the last '@'. Pass the result to
// New.
func URLSecrets(urls ...string) []string {
	var out []string
	for _, raw := range urls {
		if i := strings.Index(raw, "://"); i >= 0 {
			rest := raw[i+3:]
			if at := strings.LastIndexByte(rest, '@'); at >= 0 {
				if colon := strings.IndexByte(rest[:at], ':'); colon >= 0 && colon+1 < at {
					out = append(out, rest[colon+1:at])
				}
			}
		}
		u, err := url.Parse(raw)
		if err != nil {
			continue
		}
		if u.User != nil {
			if p, ok := u.User.Password(); ok && p != "" {
				out = append(out, p)
			}
		}
		for k, vs := range u.Query() {
			if IsSecretParam(k) {
				for _, v := range vs {
					if v != "" {
						out = append(out, v)
					}
				}
			}
		}
	}
	return out
}
