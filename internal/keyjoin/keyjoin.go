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

// Tag returns key in the domain tag: tag, ':' and key. A tag holds no
// ':', so the first ':' ends it: keys of two different domains never give
// one string, whatever key holds, and neither do two different keys of
// one domain. A transport that keys some deliveries by a name the
// producer chooses and others by a name it derives tags each kind, so
// that no producer can choose the key of another message.
func Tag(tag, key string) string { return tag + ":" + key }
