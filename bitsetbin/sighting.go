package bitsetbin

// Sighting is the outcome of marking one index in a window.
type Sighting uint8

const (
	// FirstSeen means the bit was clear and is now set: the first sighting.
	FirstSeen Sighting = iota
	// Duplicate means the bit was already set: the index was marked before
	// and not rolled back.
	Duplicate
	// TooOld means the index lies below the window: nothing was recorded and
	// the window cannot tell whether it was seen. Callers choose whether to
	// fail open (treat as first seen) or closed (ask a durable store).
	TooOld
)

// String returns "first-seen", "duplicate" or "too-old".
func (v Sighting) String() string {
	switch v {
	case FirstSeen:
		return "first-seen"
	case Duplicate:
		return "duplicate"
	case TooOld:
		return "too-old"
	}
	return "sighting(" + itoa(uint64(v)) + ")"
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
