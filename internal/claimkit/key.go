package claimkit

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/acemq/msgaudit/idempotency"
)

// HashedKeyPrefix starts every hashed storage key; it is followed by 64
// lowercase hex digits of a SHA-256.
const HashedKeyPrefix = "sha256:"

// HashedKeyLength is the length of a hashed storage key.
const HashedKeyLength = len(HashedKeyPrefix) + 2*sha256.Size

// Defaults of the zero idempotency.Options fields, as the Options field
// documentation states them.
const (
	DefaultClaimTTL     = 5 * time.Minute
	DefaultRetention    = 7 * 24 * time.Hour
	DefaultMaxKeyLength = 256
	// DefaultPurgeInterval is how often the SQL stores purge on their own.
	DefaultPurgeInterval = time.Hour
	// DefaultPurgeBatch bounds the rows one purge statement deletes.
	DefaultPurgeBatch = 1000
)

// Normalize is what a backend's constructor does with its
// idempotency.Options: a negative ClaimTTL, Retention, MaxKeyLength or
// PurgeBatch is idempotency.ErrOptions, and every zero field takes its default (the
// system clock for Clock). It answers as the memory store's own check
// does (TestNormalizeAgreesWithMemory).
func Normalize(o idempotency.Options) (idempotency.Options, error) {
	switch {
	case o.ClaimTTL < 0:
		return o, fmt.Errorf("%w: negative ClaimTTL %v", idempotency.ErrOptions, o.ClaimTTL)
	case o.Retention < 0:
		return o, fmt.Errorf("%w: negative Retention %v", idempotency.ErrOptions, o.Retention)
	case o.MaxKeyLength < 0:
		return o, fmt.Errorf("%w: negative MaxKeyLength %d", idempotency.ErrOptions, o.MaxKeyLength)
	case o.PurgeBatch < 0:
		return o, fmt.Errorf("%w: negative PurgeBatch %d", idempotency.ErrOptions, o.PurgeBatch)
	}
	if o.ClaimTTL == 0 {
		o.ClaimTTL = DefaultClaimTTL
	}
	if o.Retention == 0 {
		o.Retention = DefaultRetention
	}
	if o.Clock == nil {
		o.Clock = idempotency.ClockFunc(time.Now)
	}
	if o.MaxKeyLength == 0 {
		o.MaxKeyLength = DefaultMaxKeyLength
	}
	if o.PurgeInterval == 0 {
		o.PurgeInterval = DefaultPurgeInterval
	}
	if o.PurgeBatch == 0 {
		o.PurgeBatch = DefaultPurgeBatch
	}
	return o, nil
}

// StorageKey returns k as one string a backend can index:
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
func StorageKey(k idempotency.Key, max int) string {
	if max <= 0 {
		max = DefaultMaxKeyLength
	}
	raw := rawKey(k)
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
func rawKey(k idempotency.Key) string {
	ns := k.Namespace
	if strings.ContainsAny(ns, "%/") {
		ns = nsEscaper.Replace(ns)
	}
	return ns + "/" + k.ID
}
