// Package redact is the one implementation of secret redaction shared by
// msgaudit's packages: URL masks the password of a connection string in
// any of the forms users write (hierarchical, opaque, host-less,
// scheme-less, libpq key=value); Strict also reduces an opaque URL that
// holds userinfo to its scheme; Redactor replaces known secrets in text
// and errors; and NewHandler wraps a slog.Handler so that no log record
// carries a secret.
//
// Concurrency: every function is safe to call from several goroutines. A
// Redactor is immutable after New (With returns a new one), so it may be
// shared freely; a Handler is as safe as the handler it wraps.
package redact
