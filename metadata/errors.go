package metadata

import "errors"

// Sentinel errors of the package. Errors returned by stores wrap them with
// %w; match them with errors.Is.
var (
	// ErrInvalidKey is returned for an empty key.
	ErrInvalidKey = errors.New("metadata: invalid key")
	// ErrInvalidValue is returned for a value longer than MaxValueLen.
	ErrInvalidValue = errors.New("metadata: invalid value")
	// ErrInvalidName is returned for a table name or key prefix a backend
	// cannot use.
	ErrInvalidName = errors.New("metadata: invalid table name or prefix")
	// ErrUnsupportedURL is returned by Open for a URL it cannot handle.
	ErrUnsupportedURL = errors.New("metadata: unsupported store URL")
	// ErrClosed is returned by the operations of a closed Memory store.
	ErrClosed = errors.New("metadata: store closed")
)
