package idempotency

import "errors"

// Sentinel errors added beside ErrClaimLost and ErrInvalidKey (which live in
// idempotency.go). Wrap them with %w; match them with errors.Is.
var (
	// ErrOptions is returned for invalid Options or GroupOptions (a
	// negative duration, length or batch size).
	ErrOptions = errors.New("idempotency: invalid options")
	// ErrClosed is returned by a store used after Close.
	ErrClosed = errors.New("idempotency: store closed")
	// ErrUnsupportedURL is returned by Open for a URL whose scheme names no
	// backend.
	ErrUnsupportedURL = errors.New("idempotency: unsupported store URL")
)
