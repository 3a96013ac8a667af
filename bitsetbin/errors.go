package bitsetbin

import "errors"

var (
	// ErrDepth reports a depth outside 0..MaxDepth (0 means DefaultDepth).
	ErrDepth = errors.New("bitsetbin: depth out of range")
	// ErrCorrupt reports a snapshot that is truncated, has trailing bytes,
	// an unknown version, or fields that contradict each other. It is
	// wrapped with what was wrong.
	ErrCorrupt = errors.New("bitsetbin: corrupt snapshot")
)
