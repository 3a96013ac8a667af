package outbox

// SetClaimBytes sets the claim's byte budget until the returned func
// restores it.
func SetClaimBytes(n int64) (restore func()) {
	old := claimBytes
	claimBytes = n
	return func() { claimBytes = old }
}
