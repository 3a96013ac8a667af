// Package msgid splits message ids into a producer key and a sequence
// number, and generates unique ids in the OpenWire shape.
//
// An id is "<key>:<seq>": the key is everything before the last ':' and the
// sequence is the decimal number after it, a uint64. Both OpenWire JMS ids
// ("ID:host-41234-1700000000000-1:1:1:1:42" → key
// "ID:host-41234-1700000000000-1:1:1:1", seq 42) and plain "seed:seq" ids
// work. The key is opaque: any non-empty string, colons included.
//
// # Canonical form only
//
// The sequence must be in canonical decimal form: ASCII digits only, no sign,
// no spaces, no leading zeros ("0" itself is fine), at most math.MaxUint64.
// ActiveMQ parses "abc:+5" and "abc:007" with Long.parseLong and so treats
// "abc:5", "abc:+5" and "abc:007" as one message; msgaudit rejects the
// non-canonical spellings with ErrMalformed instead of normalising them.
// Since each message then has exactly one accepted spelling, an id and its
// string form can never be confused, and a key+sequence pair always prints
// back to the id it came from (ID.String).
//
// Malformed input is an error, never a panic and never a guess. Split
// allocates nothing on success: the key is a substring of the id.
//
// # Generating ids
//
// A Generator is built once per process from GeneratorOptions (host, port,
// clock, instance) and hands out Producers with keys
// "ID:<host>-<port>-<millis>-<instance>:<n>", n counting from 1; a
// Producer's Next returns "<key>:<seq>", seq counting from 1 — the shape of
// ActiveMQ's IdGenerator output ("ID:vm-39169-1796041243133-0:1"). ActiveMQ
// numbers generator instances with a JVM-wide counter; this package has no
// globals, so the instance number is an option (default 0).
//
// Besides Split, Parse and the Generator, the package has SplitLimit (Split
// with a length limit), Truncate (for error messages), SanitizeHost,
// Producer.AppendNext and GeneratorOptions.Instance.
//
// # Concurrency
//
// Split, Parse and the ID methods are pure functions. A Generator and the
// Producers it creates are safe for concurrent use by many goroutines; there
// is no package-level state.
package msgid
