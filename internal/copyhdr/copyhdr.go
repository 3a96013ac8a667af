// Package copyhdr names the headers the transports write on the copies
// they send (retry copies and dead-lettered records), so both transports
// and the tools spell them once.
package copyhdr

import "strconv"

const (
	// DeadLetterReason carries Result.Reason on a dead-lettered copy.
	DeadLetterReason = "x-dead-letter-reason"
	// Attempts carries Result.Attempt on a dead-lettered copy (and the
	// attempts already made on a retry copy).
	Attempts = "x-attempts"
	// OriginalKey carries the idempotency key on a copy a transport
	// resends, so the copy is audited under the original's key. Any
	// producer can set it: a transport honours it (and Attempts) only on
	// copies it can authenticate as its own.
	OriginalKey = "x-original-key"
)

// DeadLetter returns the headers of the dead-lettered copy of a delivery
// with headers h and idempotency key key: h plus the reason and the
// attempt count, and the key when there is one.
func DeadLetter(h map[string]string, key, reason string, attempt int) map[string]string {
	out := make(map[string]string, len(h)+3)
	for k, v := range h {
		out[k] = v
	}
	out[DeadLetterReason] = reason
	out[Attempts] = strconv.Itoa(attempt)
	if key != "" {
		out[OriginalKey] = key
	}
	return out
}
