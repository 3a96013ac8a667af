package metadata

import (
	"context"
	"crypto/sha256"
	"fmt"
	"io"
)

// Store keeps one value per key and moves it forward with compare-and-set.
// Implementations are safe for concurrent use.
type Store interface {
	// Get returns the value stored under key; ok is false when there is
	// none.
	Get(ctx context.Context, key string) (value string, ok bool, err error)
	// PutIfAbsent stores value under key if the key has no value yet and
	// reports stored = true. Otherwise it changes nothing and returns the
	// value already stored as prev.
	PutIfAbsent(ctx context.Context, key, value string) (prev string, stored bool, err error)
	// Replace sets key's value to new if, and only if, its current value is
	// old, and reports whether it did. A key without a value is never
	// replaced. Of several callers replacing the same old value at once,
	// exactly one gets true.
	Replace(ctx context.Context, key, old, new string) (bool, error)
}

// Remover is implemented by stores that can delete a key, as every store of
// this package does. Remove is compare-and-delete: it deletes key only if
// its value is still value, and reports whether it did, so a caller undoing
// its own put never deletes a value someone else stored since.
type Remover interface {
	Remove(ctx context.Context, key, value string) (bool, error)
}

// StoreCloser is a Store that holds resources (connections, a file); Open
// returns one.
type StoreCloser interface {
	Store
	Remover
	io.Closer
}

const (
	// MaxKeyLen is the longest key stored verbatim; longer keys are stored
	// under their SHA-256 digest (see the package documentation).
	MaxKeyLen = 256
	// MaxValueLen is the longest value a store accepts.
	MaxValueLen = 64 << 10
)

// hashedMark starts every hashed storage key. No verbatim storage key starts
// with it: keys that do are hashed too, which keeps the mapping injective up
// to SHA-256 collisions.
const hashedMark = 0xFF

// StorageKey returns the byte string a backend stores for key: key itself
// when it is at most MaxKeyLen bytes and does not start with 0xFF, otherwise
// 0xFF followed by the 32-byte SHA-256 digest of key. It returns
// ErrInvalidKey for an empty key.
func StorageKey(key string) (string, error) {
	if key == "" {
		return "", ErrInvalidKey
	}
	if len(key) <= MaxKeyLen && key[0] != hashedMark {
		return key, nil
	}
	sum := sha256.Sum256([]byte(key))
	var b [1 + sha256.Size]byte
	b[0] = hashedMark
	copy(b[1:], sum[:])
	return string(b[:]), nil
}

// check is CheckArgs, the name the stores of this package call.
func check(ctx context.Context, key string, values ...string) (string, error) {
	return CheckArgs(ctx, key, values...)
}

// CheckArgs validates the arguments of an operation and the context, for
// backends to call first in every method: it returns the storage key (see
// StorageKey), or the error to return with nothing changed (ctx's error,
// ErrInvalidKey, or ErrInvalidValue for a value above MaxValueLen).
func CheckArgs(ctx context.Context, key string, values ...string) (string, error) {
	if err := ctx.Err(); err != nil {
		return "", err
	}
	sk, err := StorageKey(key)
	if err != nil {
		return "", err
	}
	for _, v := range values {
		if len(v) > MaxValueLen {
			return "", fmt.Errorf("%w: %d bytes, limit %d", ErrInvalidValue, len(v), MaxValueLen)
		}
	}
	return sk, nil
}
