package msgid

import "errors"

var (
	// ErrMalformed reports an id that is not "<key>:<seq>" in canonical
	// form. It is wrapped with the (truncated) offending id.
	ErrMalformed = errors.New("msgid: malformed id")
	// ErrTooLong reports an id longer than the caller's limit (see
	// SplitLimit). It is wrapped with the length, the limit and the
	// (truncated) id.
	ErrTooLong = errors.New("msgid: id too long")
)
