package idempotency

// GroupQueued returns how many requests of each kind (claim, confirm,
// release) a Group store has queued and not yet sent, and how many
// flusher goroutines run. s must come from Group over a BatchStore.
func GroupQueued(s Store) (queued [3]int, flushers int) {
	g := s.(*groupStore)
	for i, b := range g.batchers() {
		b.mu.Lock()
		queued[i] = len(b.queue)
		if b.running {
			flushers++
		}
		b.mu.Unlock()
	}
	return queued, flushers
}

// Normalize is Options.normalize, for the check that the backends'
// claimkit.Normalize agrees with it.
func Normalize(o Options) (Options, error) { return o.normalize() }
