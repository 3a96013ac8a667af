package bitsetbin

// Verdict is the outcome of marking one index in a window.
type Verdict uint8

const (
	// New means the bit was clear and is now set: the first sighting.
	New Verdict = iota
	// Duplicate means the bit was already set: the index was marked before
	// and not rolled back.
	Duplicate
	// TooOld means the index lies below the window: nothing was recorded and
	// the window cannot tell whether it was seen. Callers choose whether to
	// fail open (treat as new) or closed (ask a durable store).
	TooOld
)

// String returns "new", "duplicate" or "too-old".
func (v Verdict) String() string {
	switch v {
	case New:
		return "new"
	case Duplicate:
		return "duplicate"
	case TooOld:
		return "too-old"
	}
	return "verdict(" + itoa(uint64(v)) + ")"
}

func itoa(u uint64) string {
	var b [20]byte
	i := len(b)
	for {
		i--
		b[i] = byte('0' + u%10)
		u /= 10
		if u == 0 {
			return string(b[i:])
		}
	}
}
