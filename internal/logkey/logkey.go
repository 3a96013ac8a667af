// Package logkey bounds the text a producer controls (an idempotency key,
// a destination, a reason or an error quoting them) before it goes into a
// log line or a span, so that neither grows with what producers send.
package logkey

import (
	"crypto/sha256"
	"fmt"
	"strings"
)

// MaxBytes is the longest text String returns as it is; no result of
// String is longer.
const MaxBytes = 256

// headBytes is how much of a longer text String keeps.
const headBytes = 64

// String returns s whole up to MaxBytes, else its first 64 bytes (cut to
// valid UTF-8) followed by "...", its length and its hex SHA-256: the same
// long text gives the same result, and two long texts that differ give
// different ones.
func String(s string) string { return bound(s, MaxBytes, headBytes) }

// MaxErrorBytes is the longest error text Error returns as it is.
const MaxErrorBytes = 4096

// Error returns err's text bounded as String bounds a key, but keeping up
// to MaxErrorBytes (an error, a panic's value and stack, says more than a
// key), or "" for a nil err.
func Error(err error) string {
	if err == nil {
		return ""
	}
	return bound(err.Error(), MaxErrorBytes, MaxErrorBytes-128)
}

// bound returns s whole up to max bytes, else its first head bytes, its
// length and its hash.
func bound(s string, max, head int) string {
	if len(s) <= max {
		return s
	}
	sum := sha256.Sum256([]byte(s))
	return fmt.Sprintf("%s...(%d bytes, sha256 %x)", strings.ToValidUTF8(s[:head], ""), len(s), sum)
}
