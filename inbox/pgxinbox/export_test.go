package pgxinbox

// Waiting returns how many deliveries wait for one of ib's lanes.
func Waiting(ib *Inbox) int { return ib.lanes.Waiting() }

// PurgeDone is closed once ib's automatic purge goroutine has returned.
func PurgeDone(ib *Inbox) <-chan struct{} { return ib.core.PurgeDone() }
