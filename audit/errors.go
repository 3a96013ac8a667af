package audit

import "errors"

// ErrOptions reports a negative or out-of-range option: a depth below zero
// or above bitsetbin.MaxDepth, a producer cap below zero or above
// MaxProducersLimit, a negative maximum id length or shard count.
var ErrOptions = errors.New("audit: invalid options")

// ErrCorrupt reports a snapshot that UnmarshalBinary cannot decode: wrong
// magic or version, a count or length larger than the bytes present, an
// out-of-range setting, a depth or producer cap above the receiving
// audit's, a duplicate or invalid producer key, or a bad
// window encoding. The audit is left unchanged.
var ErrCorrupt = errors.New("audit: corrupt snapshot")
