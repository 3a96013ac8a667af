package rabbitconsumer

import "github.com/acemq/msgaudit/internal/redact"

// newRedactor returns a Redactor of the passwords the given connection
// URLs hold (userinfo and secret query parameters, decoded and as written).
func newRedactor(urls ...string) redact.Redactor {
	return redact.New(redact.URLSecrets(urls...)...)
}
