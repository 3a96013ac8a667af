package idempotency

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
	"unicode/utf8"
)

// HashedKeyPrefix starts every hashed storage key; it is followed by 64
// lowercase hex digits of a SHA-256.
const HashedKeyPrefix = "sha256:"

// HashedKeyLength is the length of a hashed storage key.
const HashedKeyLength = len(HashedKeyPrefix) + 2*sha256.Size

// Validate returns ErrInvalidKey when the key has an empty ID. An empty
// Namespace is allowed: a store serving a single consumer group may leave it
// empty, and the empty namespace is as separate from every other namespace
// as any two namespaces are.
func (k Key) Validate() error {
	if k.ID == "" {
		return ErrInvalidKey
	}
	return nil
}

// StorageKey returns the key as one string a backend can index:
//
//	escape(Namespace) + "/" + ID
//
// where escape replaces '%' with "%25" and '/' with "%2F", so the first '/'
// always separates the namespace from the ID and two different keys never
// share a storage key. When that string is longer than max bytes, is not
// valid UTF-8 or contains a NUL byte (which PostgreSQL text cannot hold), the
// storage key is instead HashedKeyPrefix followed by the hex SHA-256 of that
// string (HashedKeyLength bytes). A hashed key contains no '/', so it never
// equals a verbatim one. Keys are never truncated.
//
// max <= 0 means DefaultMaxKeyLength; a max below HashedKeyLength still
// yields HashedKeyLength-byte hashed keys.
func (k Key) StorageKey(max int) string {
	if max <= 0 {
		max = DefaultMaxKeyLength
	}
	raw := k.rawKey()
	if len(raw) <= max && utf8.ValidString(raw) && strings.IndexByte(raw, 0) < 0 {
		return raw
	}
	sum := sha256.Sum256([]byte(raw))
	return HashedKeyPrefix + hex.EncodeToString(sum[:])
}

// nsEscaper escapes a namespace for rawKey. A Replacer is safe for
// concurrent use; building one per call cost every delivery an allocation,
// because destinations ("/queue/orders") always contain a slash.
var nsEscaper = strings.NewReplacer("%", "%25", "/", "%2F")

// rawKey is the injective join of namespace and ID described at StorageKey.
func (k Key) rawKey() string {
	ns := k.Namespace
	if strings.ContainsAny(ns, "%/") {
		ns = nsEscaper.Replace(ns)
	}
	return ns + "/" + k.ID
}
