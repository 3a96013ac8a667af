package redact

import (
	"cmp"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strconv"
	"strings"
)

// Redactor replaces known secrets (a passcode, the passwords of URLs) in
// text headed for a log line or an error. The zero value replaces
// nothing. A Redactor is immutable: With returns a new one.
type Redactor struct {
	// secrets returns the secrets, longest first, so no secret is cut by
	// a shorter one; the slice is never changed once made. It is a
	// function because fmt prints a struct's unexported field by
	// reflection, without calling its Format: a Redactor held that way (a
	// consumer's field) then prints a function's address, not the secrets.
	secrets func() []string
}

// list returns r's secrets, nil for none.
func (r Redactor) list() []string {
	if r.secrets == nil {
		return nil
	}
	return r.secrets()
}

// New returns a Redactor of the given secrets; empty strings are ignored.
// Each secret is also replaced in its URL-escaped forms, as it appears
// inside a connection string.
func New(secrets ...string) Redactor {
	return Redactor{}.With(secrets...)
}

// With returns a Redactor of r's secrets and the given ones.
func (r Redactor) With(secrets ...string) Redactor {
	all := slices.Clone(r.list())
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
	if len(all) == 0 {
		return Redactor{}
	}
	all = slices.Compact(all)
	return Redactor{secrets: func() []string { return all }}
}

// GoString returns "redact.Redactor{xxxxx}", or "redact.Redactor{}" for
// a Redactor without secrets: never the secrets themselves.
func (r Redactor) GoString() string {
	if r.Empty() {
		return "redact.Redactor{}"
	}
	return "redact.Redactor{" + Mask + "}"
}

// Format prints GoString for every verb (quoted for %q), so that no verb
// reaches the secrets.
func (r Redactor) Format(f fmt.State, verb rune) { Format(f, verb, r.GoString()) }

// Empty reports whether r has no secret to replace.
func (r Redactor) Empty() bool { return len(r.list()) == 0 }

// String returns s with every secret replaced by Mask.
func (r Redactor) String(s string) string {
	for _, p := range r.list() {
		s = strings.ReplaceAll(s, p, Mask)
	}
	return s
}

// Error returns err unchanged if its message holds no secret, else an
// error that prints the message with the secrets replaced and wraps err,
// so errors.Is and errors.As still see the chain. Error(nil) is nil.
func (r Redactor) Error(err error) error {
	if err == nil || r.Empty() {
		return err
	}
	msg := err.Error()
	if clean := r.String(msg); clean != msg {
		return &redactedError{msg: clean, err: err, r: r}
	}
	return err
}

// redactedError prints err's message redacted. Its Unwrap redacts the
// errors err wraps as well, so a caller walking the chain with
// errors.Unwrap never reaches a raw message (a broker's ERROR text may echo
// the login); errors.Is and errors.As see err's whole chain (Is, As), and
// As hands out the typed originals, whose messages are not redacted.
type redactedError struct {
	msg string
	err error
	r   Redactor
}

func (e *redactedError) Error() string { return e.msg }

// GoString shows the redacted message only: the fields hold the raw error
// and the secrets.
func (e *redactedError) GoString() string {
	return "&redact.redactedError{msg:" + strconv.Quote(e.msg) + "}"
}

// Format prints the redacted message for every verb (quoted for %q), and
// GoString for %#v.
func (e *redactedError) Format(f fmt.State, verb rune) {
	if verb == 'v' && f.Flag('#') {
		Format(f, verb, e.GoString())
		return
	}
	Format(f, verb, e.msg)
}

// Unwrap returns the redacted errors wrapped by err (one or several, as
// err wraps them). With the methods on *redactedError the single and the
// multiple form cannot both be offered, so a multi-error comes back joined.
func (e *redactedError) Unwrap() error {
	switch u := e.err.(type) {
	case interface{ Unwrap() error }:
		return e.r.Error(u.Unwrap())
	case interface{ Unwrap() []error }:
		errs := u.Unwrap()
		out := make([]error, len(errs))
		for i, x := range errs {
			out[i] = e.r.Error(x)
		}
		return errors.Join(out...)
	}
	return nil
}

// Is reports whether err's chain holds target.
func (e *redactedError) Is(target error) bool { return errors.Is(e.err, target) }

// As finds target's type in err's chain.
func (e *redactedError) As(target any) bool { return errors.As(e.err, target) }

// URLSecrets returns the secrets held by the given connection strings: the
// userinfo password (decoded, and as written), and the values of query
// parameters that hold a secret (password=, sslpassword=, token=, any name
// with "pass" in it). A string url.Parse rejects still yields the text
// between the userinfo's first ':' and the last '@'; the query is read as
// text, so a malformed value (a bad %-escape) is found too. Pass the
// result to New.
//
// A string without "://" is taken for a libpq key=value connection string
// as well (DSNSecrets).
func URLSecrets(urls ...string) []string {
	var out []string
	for _, raw := range urls {
		if !strings.Contains(raw, "://") {
			out = append(out, DSNSecrets(raw)...)
		}
		if i := strings.Index(raw, "://"); i >= 0 {
			rest := raw[i+3:]
			if at := strings.LastIndexByte(rest, '@'); at >= 0 {
				if colon := strings.IndexByte(rest[:at], ':'); colon >= 0 && colon+1 < at {
					out = append(out, rest[colon+1:at])
				}
			}
		}
		out = append(out, querySecrets(raw)...)
		u, err := url.Parse(raw)
		if err != nil {
			continue
		}
		if u.User != nil {
			if p, ok := u.User.Password(); ok && p != "" {
				out = append(out, p)
			}
		}
	}
	return out
}

// querySecrets returns the values of the secret parameters in the query of
// raw (the text after its first '?', up to a '#'), found without
// url.ParseQuery, which drops a malformed pair: each value as written, and
// decoded when it decodes.
func querySecrets(raw string) []string {
	_, query, ok := strings.Cut(raw, "?")
	if !ok {
		return nil
	}
	query, _, _ = strings.Cut(query, "#")
	var out []string
	for _, part := range strings.FieldsFunc(query, func(r rune) bool { return r == '&' || r == ';' }) {
		k, v, _ := strings.Cut(part, "=")
		if name, err := url.QueryUnescape(k); err == nil {
			k = name
		}
		if !IsSecretParam(k) || v == "" {
			continue
		}
		out = append(out, v)
		if dec, err := url.QueryUnescape(v); err == nil && dec != "" && dec != v {
			out = append(out, dec)
		}
	}
	return out
}
