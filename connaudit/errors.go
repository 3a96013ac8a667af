package connaudit

import "errors"

// ErrDestination reports a destination that is neither a queue, a topic, a
// temporary queue nor a temporary topic, or that has no name. It is wrapped
// with the (truncated) offending input.
var ErrDestination = errors.New("connaudit: invalid destination")

// ErrOptions reports a negative or out-of-range option given to New or to a
// setter.
var ErrOptions = errors.New("connaudit: invalid options")

// ErrCorrupt reports a snapshot that cannot be decoded: wrong magic or
// version, a count or length larger than the bytes present, a setting
// above the receiving audit's (a snapshot never raises a limit), or an
// invalid embedded audit. The connection audit is left unchanged.
var ErrCorrupt = errors.New("connaudit: corrupt snapshot")
