package tune

import "errors"

var (
	// ErrBadLine is returned by Read in strict mode for the first line
	// that is not "<id>" or "<id> <destination>"; it is wrapped with the
	// line number and the reason.
	ErrBadLine = errors.New("tune: bad trace line")
	// ErrOptions reports invalid options (a depth or cap out of range, a
	// target outside (0,1], a negative count).
	ErrOptions = errors.New("tune: invalid options")
	// ErrDistribution reports a distance distribution ParseDistribution
	// cannot parse.
	ErrDistribution = errors.New("tune: invalid distance distribution")
	// ErrTooLarge is returned by Read for a trace of more than 2^31-1
	// message ids.
	ErrTooLarge = errors.New("tune: trace too large")
)
