// Package metadata is a small key/value store with compare-and-set, the
// backing store of Spring Integration's MetadataStoreSelector idea: remember
// one value per key (a file's last processed line, a stream's last
// timestamp) and move it forward atomically when several consumers race.
//
// A Store offers three operations, context first:
//
//   - Get reads the value of a key.
//   - PutIfAbsent stores a value only if the key has none, and otherwise
//     returns the value already there.
//   - Replace swaps the value from old to new only if the stored value is
//     still old (compare-and-set). Of two callers racing to replace the same
//     old value, exactly one succeeds.
//
// Every store here also implements Remover, a compare-and-delete, so a
// caller can undo a put of its own (the metadata-store selector does when a
// handler fails).
//
// Memory (one process) lives here; the durable backends are packages of
// their own, so a program links only the drivers it uses: sqlitemeta
// (embedded, durable; modernc.org/sqlite, no cgo), redismeta (one Lua
// script per operation) and pgmeta (PostgreSQL, one statement per
// operation). Open builds one from a URL, as idempotency.Open does:
// "memory", "sqlite:PATH", "redis://…", "rediss://…", "redis+cluster://…",
// "redis+sentinel://…", "postgres://…", once
// the backend's package is imported (import _ ".../metadata/redismeta");
// the error for a scheme whose package is missing names it. The backends
// can also wrap a client, pool or *sql.DB the application already has
// (redismeta.New, pgmeta.New, sqlitemeta.New).
//
// # Keys and values
//
// Keys and values are arbitrary byte strings (stored as BLOB / bytea, so
// invalid UTF-8 and NUL bytes round-trip). An empty key is ErrInvalidKey. A
// key longer than MaxKeyLen bytes, or one whose first byte is 0xFF, is
// stored under 0xFF followed by its SHA-256 digest, so every backend can
// index it; it is never truncated, and a hostile key cannot be built to
// collide with a hashed one without a SHA-256 collision. A value longer than
// MaxValueLen bytes is ErrInvalidValue.
//
// Stored values never expire: like Spring's metadata stores, the store holds
// one entry per key forever, so choose keys with bounded cardinality (a file
// name, a stream, a partition), not one per message.
//
// # Errors
//
// A backend error or timeout is returned as an error, never as a result: a
// failed PutIfAbsent is not "stored", a failed Replace is not "lost the
// race". A context that is already cancelled returns ctx.Err() with nothing
// changed.
//
// # Concurrency
//
// Every Store in this package is safe for concurrent use by multiple
// goroutines, and the Redis, PostgreSQL and SQLite stores are safe for use
// by several processes sharing one server, database or file.
package metadata
