package idempotency

import "github.com/acemq/msgaudit/internal/redact"

// RedactURL returns rawURL with any password replaced by "xxxxx": the
// password of the userinfo (redis://user:pw@host, postgres://u:pw@h/db) and
// query parameters such as password= or sslpassword=. A string that does
// not parse as a hierarchical URL — no scheme (//u:pw@h, u:pw@h), an opaque
// form without "//" (redis:u:pw@h), userinfo-like text in a path with no
// host (redis:/u:pw@h, redis:///u:pw@h), a bad port or escape — is masked
// textually the same way, erring towards masking too much, so the result
// is safe to put in an error or a log line either way.
func RedactURL(rawURL string) string { return redact.URL(rawURL) }
