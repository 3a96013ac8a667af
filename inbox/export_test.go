package inbox

// Waiting returns how many deliveries wait for one of ib's lanes.
func Waiting(ib *Inbox) int { return ib.lanes.Waiting() }
