package idempotency

import (
	"crypto/rand"
	"encoding/hex"
)

// NewToken returns a fresh owner token: 16 bytes from crypto/rand as 32
// lowercase hex digits. Two claims never share a token in practice, so a
// holder whose lease lapsed cannot act on its successor's claim.
func NewToken() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go 1.24+); it crashes the program instead.
	return hex.EncodeToString(b[:])
}
