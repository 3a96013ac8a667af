// Package keyjoin joins the names a message's idempotency key is scoped
// by (a destination or namespace, a consumer) into one string, injectively:
// two different pairs never give one string, so two different messages
// never meet on one key.
package keyjoin

import "strings"

// consumerEscaper escapes the separator and the escape character in a
// consumer name. A Replacer is safe for concurrent use.
var consumerEscaper = strings.NewReplacer("%", "%25", "#", "%23")

// Topic returns the scope of a topic delivery: base, "#" and the consumer
// with '%' written "%25" and '#' written "%23". The escaped consumer holds
// no '#', so the last '#' always separates the two and base may hold any
// byte. A consumer name without '%' or '#' is written as it is, so scopes
// and namespaces stored before the escaping keep their form.
func Topic(base, consumer string) string {
	if strings.ContainsAny(consumer, "%#") {
		consumer = consumerEscaper.Replace(consumer)
	}
	return base + "#" + consumer
}
